# --- identity ---------------------------------------------------------------

variable "name" {
  description = "Deployment name: prefixes every resource and is the Service dimension of the metrics. Lowercase letters, digits and '-', at most 20 characters (ALB target group names are limited to 32)."
  type        = string
  default     = "lakepubsub"

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{0,19}$", var.name))
    error_message = "name must match ^[a-z][a-z0-9-]{0,19}$."
  }
}

variable "tags" {
  description = "Tags applied to every resource."
  type        = map(string)
  default     = {}
}

# --- network ----------------------------------------------------------------

variable "vpc_id" {
  description = "Existing VPC to deploy into."
  type        = string
}

variable "public_subnet_ids" {
  description = "Subnets of the load balancer (public for an internet-facing ALB; private if alb_internal), in at least two AZs."
  type        = list(string)
}

variable "private_subnet_ids" {
  description = "Private subnets of the API tasks and the Spark workers; they need egress to S3, ECR, Secrets Manager and CloudWatch (NAT gateway or VPC endpoints)."
  type        = list(string)
}

variable "ingress_cidrs" {
  description = "IPv4 CIDR blocks allowed to reach the API on 443."
  type        = list(string)
}

variable "egress_cidrs" {
  description = "IPv4 CIDR blocks the API tasks and Spark workers may reach on 443 (AWS APIs, and push endpoints for the API)."
  type        = list(string)
  default     = ["0.0.0.0/0"]
}

# --- load balancer ----------------------------------------------------------

variable "certificate_arn" {
  description = "ACM certificate of the API's HTTPS listener."
  type        = string
}

variable "alb_internal" {
  description = "Make the load balancer internal."
  type        = bool
  default     = false
}

variable "alb_deletion_protection" {
  description = "Protect the load balancer from deletion."
  type        = bool
  default     = true
}

variable "alb_idle_timeout_seconds" {
  description = "ALB idle timeout; must exceed the longest pull clients wait on."
  type        = number
  default     = 120
}

variable "alb_access_logs_bucket" {
  description = "Existing bucket for ALB access logs; null disables them."
  type        = string
  default     = null
}

variable "waf_web_acl_arn" {
  description = "Existing WAFv2 web ACL to put in front of the API; null for none."
  type        = string
  default     = null
}

# --- lake -------------------------------------------------------------------

variable "lake_bucket_name" {
  description = "Name of the S3 bucket created for the lake."
  type        = string
}

variable "lake_prefix" {
  description = "Key prefix of the lake inside the bucket (no leading or trailing '/'); every IAM grant stops at it."
  type        = string
  default     = "lake"

  validation {
    condition     = can(regex("^[A-Za-z0-9!_.'()-]+(/[A-Za-z0-9!_.'()-]+)*$", var.lake_prefix))
    error_message = "lake_prefix must be one or more '/'-separated segments of safe S3 key characters, with no leading or trailing '/'."
  }
}

variable "lake_versioning_enabled" {
  description = "S3 versioning on the lake bucket. On by default: a bad vacuum or a deleted prefix stays recoverable for lake_noncurrent_version_retention_days (docs/operations.md, backup and restore)."
  type        = bool
  default     = true
}

variable "lake_noncurrent_version_retention_days" {
  description = "Days S3 keeps files that vacuum deleted (noncurrent versions) before expiring them."
  type        = number
  default     = 7
}

variable "lake_enforce_conditional_commits" {
  description = "Bucket policy refuses Delta commit files written without If-None-Match (protects the log from writers that overwrite commits). Verify first (docs/operations.md, S3 settings)."
  type        = bool
  default     = false
}

variable "lake_access_log_bucket" {
  description = "Existing bucket for S3 server access logs of the lake bucket; null disables them."
  type        = string
  default     = null
}

# --- images -----------------------------------------------------------------

variable "api_image_tag" {
  description = "Tag (or @sha256 digest suffix, e.g. \"@sha256:...\") of the API image in the <name>/api repository."
  type        = string
}

variable "jobs_image_tag" {
  description = "Tag (or @sha256 digest suffix) of the jobs image in the <name>/jobs repository."
  type        = string
}

variable "adot_image" {
  description = "AWS Distro for OpenTelemetry collector image used as the metrics sidecar."
  type        = string
  default     = "public.ecr.aws/aws-observability/aws-otel-collector:v0.43.3"
}

variable "cpu_architecture" {
  description = "CPU architecture of API tasks, job tasks and EMR Serverless workers: X86_64 or ARM64 (the images must match)."
  type        = string
  default     = "X86_64"

  validation {
    condition     = contains(["X86_64", "ARM64"], var.cpu_architecture)
    error_message = "cpu_architecture must be X86_64 or ARM64."
  }
}

# --- API service --------------------------------------------------------------

variable "api_cpu" {
  description = "Fargate CPU units per API task (1024 = 1 vCPU)."
  type        = number
  default     = 1024
}

variable "api_memory" {
  description = "Fargate memory (MiB) per API task."
  type        = number
  default     = 2048
}

variable "api_workers" {
  description = "uvicorn worker processes per API task; one per vCPU (api_cpu / 1024)."
  type        = number
  default     = 1
}

variable "api_min_tasks" {
  description = "Fewest API tasks; 2 or more keeps the API up through an AZ or task loss."
  type        = number
  default     = 2
}

variable "api_max_tasks" {
  description = "Most API tasks autoscaling may run."
  type        = number
  default     = 10
}

variable "api_cpu_target_percent" {
  description = "Average CPU the API service scales to hold."
  type        = number
  default     = 60
}

variable "api_requests_per_task_per_minute" {
  description = "ALB requests per task per minute the API service scales to hold (per target group: publish, everything else)."
  type        = number
  default     = 6000
}

variable "allow_anonymous" {
  description = "LAKEPUBSUB_ALLOW_ANONYMOUS: accept requests without an API key. Keep false outside a sandbox."
  type        = bool
  default     = false
}

variable "container_insights" {
  description = "Container Insights on the ECS cluster: enhanced, enabled or disabled."
  type        = string
  default     = "enabled"
}

# --- jobs -------------------------------------------------------------------

variable "jobs_runtime" {
  description = "Where the Spark maintenance jobs run: \"emr_serverless\" (EMR Serverless, Spark 4.0.2 of emr-spark-8.0.0) or \"ecs\" (Fargate tasks running Spark 4.2 in local mode). terraform/README.md explains the choice."
  type        = string
  default     = "emr_serverless"

  validation {
    condition     = contains(["emr_serverless", "ecs"], var.jobs_runtime)
    error_message = "jobs_runtime must be \"emr_serverless\" or \"ecs\"."
  }
}

variable "job_schedules" {
  description = "EventBridge Scheduler expression of each maintenance job. Compaction should run about every 100 commits of the busiest table (docs/operations.md, sizing)."
  type = object({
    compact  = string
    truncate = string
    gc       = string
  })
  default = {
    compact  = "rate(10 minutes)"
    truncate = "rate(15 minutes)"
    gc       = "rate(1 hour)"
  }
}

variable "job_schedule_timezone" {
  description = "IANA time zone of cron() job schedules."
  type        = string
  default     = "UTC"
}

variable "job_timeout_minutes" {
  description = "EMR Serverless cancels a job run after this many minutes."
  type        = number
  default     = 60
}

variable "emr_release_label" {
  description = "EMR Serverless release label; must offer Spark 4 (emr-spark-8.0.0 or later)."
  type        = string
  default     = "emr-spark-8.0.0"

  validation {
    condition     = startswith(var.emr_release_label, "emr-spark-")
    error_message = "emr_release_label must be a Spark 4 runtime label (emr-spark-8.0.0 or later); emr-7.x labels ship Spark 3.5, which has no Python data source API the jobs need."
  }
}

variable "emr_max_capacity" {
  description = "Ceiling on what all running job runs of the EMR Serverless application hold at once."
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

variable "emr_idle_stop_minutes" {
  description = "Minutes without job runs after which the EMR Serverless application stops."
  type        = number
  default     = 15
}

variable "emr_spark_conf" {
  description = "Extra Spark properties for every EMR Serverless job run."
  type        = map(string)
  default     = {}
}

variable "ecs_job_cpu" {
  description = "Fargate CPU units of one job task when jobs_runtime is \"ecs\"."
  type        = number
  default     = 4096
}

variable "ecs_job_memory" {
  description = "Fargate memory (MiB) of one job task when jobs_runtime is \"ecs\"."
  type        = number
  default     = 16384
}

# --- observability ----------------------------------------------------------

variable "log_retention_days" {
  description = "Days CloudWatch keeps API, metrics and job logs."
  type        = number
  default     = 365
}

variable "alarm_emails" {
  description = "E-mail addresses subscribed to the alarm topic (each must confirm)."
  type        = list(string)
  default     = []
}

variable "alarm_error_rate_percent" {
  description = "5xx share of requests (%) above which the 5xx alarm fires."
  type        = number
  default     = 1
}

variable "alarm_publish_p99_seconds" {
  description = "Publish p99 at the ALB (seconds) above which the latency alarm fires."
  type        = number
  default     = 1
}

variable "alarm_oldest_unacked_seconds" {
  description = "Oldest unacked message age (seconds) of any subscription above which the backlog alarm fires."
  type        = number
  default     = 900
}
