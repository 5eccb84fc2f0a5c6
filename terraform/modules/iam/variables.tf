variable "name" {
  description = "Deployment name; prefixes every role name."
  type        = string
}

variable "lake_bucket_arn" {
  description = "ARN of the lake bucket."
  type        = string
}

variable "lake_prefix" {
  description = "Key prefix of the lake inside the bucket, without leading or trailing slash. Every S3 grant stops at this prefix."
  type        = string

  validation {
    condition     = length(var.lake_prefix) > 0 && !startswith(var.lake_prefix, "/") && !endswith(var.lake_prefix, "/") && !strcontains(var.lake_prefix, "*")
    error_message = "lake_prefix must be non-empty, contain no '*', and have no leading or trailing '/'."
  }
}

variable "kms_key_arn" {
  description = "KMS key of the lake bucket (SSE-KMS) and of the secrets."
  type        = string
}

variable "api_keys_secret_arn" {
  description = "Secret holding LAKEPUBSUB_API_KEYS, read by the ECS agent at task start."
  type        = string
}

variable "push_signing_key_secret_arn" {
  description = "Secret holding LAKEPUBSUB_PUSH_SIGNING_KEY, read by the ECS agent at task start."
  type        = string
}

variable "api_log_group_arn" {
  description = "Log group the API containers write to."
  type        = string
}

variable "metrics_log_group_arn" {
  description = "Log group the ADOT sidecar writes embedded-metric-format records to."
  type        = string
}

variable "jobs_log_group_arn" {
  description = "Log group the Spark jobs write to."
  type        = string
}

variable "api_repository_arn" {
  description = "ECR repository of the API image."
  type        = string
}

variable "jobs_repository_arn" {
  description = "ECR repository of the jobs image."
  type        = string
}

variable "jobs_runtime" {
  description = "Where the Spark jobs run: \"emr_serverless\" or \"ecs\". Decides which service may assume the jobs role and whether a jobs execution role exists."
  type        = string

  validation {
    condition     = contains(["emr_serverless", "ecs"], var.jobs_runtime)
    error_message = "jobs_runtime must be \"emr_serverless\" or \"ecs\"."
  }
}

variable "tags" {
  description = "Tags applied to every resource of the module."
  type        = map(string)
  default     = {}
}
