variable "name" {
  description = "Deployment name; names the application, schedule group, schedules and queue."
  type        = string
}

variable "release_label" {
  description = "EMR Serverless release label. emr-spark-8.0.0 is the first GA label with Spark 4 (4.0.2); see terraform/README.md for what that means for the jobs."
  type        = string
  default     = "emr-spark-8.0.0"
}

variable "architecture" {
  description = "CPU architecture of the workers: X86_64 or ARM64 (the custom image must match)."
  type        = string
  default     = "X86_64"
}

variable "image_uri" {
  description = "Custom image (the emr-serverless target of docker/jobs.Dockerfile) in an ECR repository of this account and region."
  type        = string
}

variable "subnet_ids" {
  description = "Private subnets of the workers; they need a route to S3 and CloudWatch Logs."
  type        = list(string)
}

variable "vpc_id" {
  description = "VPC of the workers' security group."
  type        = string
}

variable "egress_cidrs" {
  description = "IPv4 CIDR blocks the workers may reach on 443 (S3, CloudWatch Logs)."
  type        = list(string)
  default     = ["0.0.0.0/0"]
}

variable "max_capacity" {
  description = "Ceiling on the resources all running jobs of the application may hold at once."
  type = object({
    cpu    = string
    memory = string
    disk   = optional(string)
  })
  default = {
    cpu    = "16 vCPU"
    memory = "64 GB"
    disk   = "200 GB"
  }
}

variable "idle_stop_minutes" {
  description = "Minutes without jobs after which the application stops (and stops costing)."
  type        = number
  default     = 15
}

variable "job_role_arn" {
  description = "Job execution role (lake read/write/delete, job logs)."
  type        = string
}

variable "lake_uri" {
  description = "Lake the jobs maintain, passed as --lake."
  type        = string
}

variable "log_group_name" {
  description = "Log group for the jobs' driver and executor logs."
  type        = string
}

variable "schedules" {
  description = "EventBridge Scheduler expression per job (compact, truncate, gc), e.g. rate(5 minutes) or cron(0 3 * * ? *)."
  type        = map(string)
}

variable "schedule_timezone" {
  description = "IANA time zone of cron() schedule expressions."
  type        = string
  default     = "UTC"
}

variable "job_timeout_minutes" {
  description = "EMR Serverless cancels a job run after this many minutes."
  type        = number
  default     = 60
}

variable "spark_conf" {
  description = "Extra Spark properties for every job run (name => value)."
  type        = map(string)
  default     = {}
}

variable "kms_key_arn" {
  description = "KMS key that encrypts the schedules (their targets' input names roles and the lake)."
  type        = string
}

variable "alarm_topic_arn" {
  description = "SNS topic that receives failed-job-run events."
  type        = string
}

variable "tags" {
  description = "Tags applied to every resource of the module."
  type        = map(string)
  default     = {}
}
