variable "bucket_name" {
  description = "Name of the S3 bucket that holds the lake (globally unique)."
  type        = string
}

variable "kms_key_arn" {
  description = "Customer-managed KMS key for SSE-KMS on every object."
  type        = string
}

variable "versioning_enabled" {
  description = "Keep S3 object versions. On (the default) turns a wrong vacuum or an accidental prefix delete into a recoverable event for noncurrent_version_retention_days; Delta time travel covers logical mistakes but not deleted files."
  type        = bool
  default     = true
}

variable "noncurrent_version_retention_days" {
  description = "Days a noncurrent object version (a file removed by vacuum or overwritten) is kept before S3 expires it. Only used with versioning on."
  type        = number
  default     = 7

  validation {
    condition     = var.noncurrent_version_retention_days >= 1
    error_message = "noncurrent_version_retention_days must be at least 1."
  }
}

variable "lake_prefix" {
  description = "Key prefix of the lake inside the bucket (no leading or trailing '/')."
  type        = string
}

variable "enforce_conditional_commits" {
  description = "Deny any PUT of a Delta commit file (<prefix>/**/_delta_log/*.json) that lacks If-None-Match, so a writer that would overwrite a commit (e.g. delta-spark's single-driver S3 log store) is refused. Off by default; docs/operations.md says how to verify before turning it on."
  type        = bool
  default     = false
}

variable "access_log_bucket" {
  description = "Existing bucket that receives S3 server access logs for the lake bucket; null disables access logging."
  type        = string
  default     = null
}

variable "tags" {
  description = "Tags applied to every resource of the module."
  type        = map(string)
  default     = {}
}
