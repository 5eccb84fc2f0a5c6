variable "name" {
  description = "Deployment name; names the task family, schedule group, schedules and queue."
  type        = string
}

variable "cluster_arn" {
  description = "ECS cluster the job tasks run in."
  type        = string
}

variable "vpc_id" {
  description = "VPC of the job tasks' security group."
  type        = string
}

variable "subnet_ids" {
  description = "Private subnets of the job tasks; they need a route to S3, ECR and CloudWatch Logs."
  type        = list(string)
}

variable "egress_cidrs" {
  description = "IPv4 CIDR blocks the job tasks may reach on 443 (S3, ECR, CloudWatch Logs)."
  type        = list(string)
  default     = ["0.0.0.0/0"]
}

variable "image" {
  description = "Full jobs image reference (the standalone target of docker/jobs.Dockerfile)."
  type        = string
}

variable "cpu" {
  description = "Fargate task CPU units of one job run; Spark runs local[*] on them."
  type        = number
  default     = 4096
}

variable "memory" {
  description = "Fargate task memory in MiB of one job run."
  type        = number
  default     = 16384
}

variable "ephemeral_storage_gib" {
  description = "Fargate ephemeral storage in GiB for Spark's shuffle and spill (21-200)."
  type        = number
  default     = 50
}

variable "cpu_architecture" {
  description = "CPU architecture of the job tasks: X86_64 or ARM64 (the image must match)."
  type        = string
  default     = "X86_64"
}

variable "task_role_arn" {
  description = "Role the job containers run as (lake read/write/delete)."
  type        = string
}

variable "execution_role_arn" {
  description = "Role the ECS agent uses to pull the jobs image and write logs."
  type        = string
}

variable "lake_uri" {
  description = "Lake the jobs maintain (LAKEPUBSUB_LAKE)."
  type        = string
}

variable "log_group_name" {
  description = "Log group of the job containers."
  type        = string
}

variable "schedules" {
  description = "EventBridge Scheduler expression per job (compact, truncate, gc)."
  type        = map(string)
}

variable "schedule_timezone" {
  description = "IANA time zone of cron() schedule expressions."
  type        = string
  default     = "UTC"
}

variable "kms_key_arn" {
  description = "KMS key that encrypts the schedules (their targets' input names roles and the lake)."
  type        = string
}

variable "alarm_topic_arn" {
  description = "SNS topic that receives failed-job events."
  type        = string
}

variable "tags" {
  description = "Tags applied to every resource of the module."
  type        = map(string)
  default     = {}
}
