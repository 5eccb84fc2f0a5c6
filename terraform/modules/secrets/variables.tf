variable "name" {
  description = "Deployment name; secrets are <name>/api-keys and <name>/push-signing-key."
  type        = string
}

variable "kms_key_arn" {
  description = "KMS key that encrypts the secret values."
  type        = string
}

variable "recovery_window_days" {
  description = "Days a deleted secret can still be restored (0 deletes at once; 7-30 otherwise)."
  type        = number
  default     = 30
}

variable "tags" {
  description = "Tags applied to every resource of the module."
  type        = map(string)
  default     = {}
}
