variable "name" {
  description = "Deployment name; used in the key alias and in the log-group ARN pattern the key may encrypt."
  type        = string
}

variable "deletion_window_days" {
  description = "Days a scheduled key deletion waits before the key is gone (7-30)."
  type        = number
  default     = 30

  validation {
    condition     = var.deletion_window_days >= 7 && var.deletion_window_days <= 30
    error_message = "deletion_window_days must be between 7 and 30."
  }
}

variable "tags" {
  description = "Tags applied to every resource of the module."
  type        = map(string)
  default     = {}
}
