variable "name" {
  description = "Deployment name; log groups are /<name>/api, /<name>/metrics and /<name>/jobs."
  type        = string
}

variable "kms_key_arn" {
  description = "KMS key that encrypts the log groups (its policy must admit CloudWatch Logs for /<name>/*)."
  type        = string
}

variable "retention_days" {
  description = "Days CloudWatch keeps log events."
  type        = number
  default     = 365
}

variable "tags" {
  description = "Tags applied to every resource of the module."
  type        = map(string)
  default     = {}
}
