variable "name" {
  description = "Deployment name; the topic is <name>-alarms."
  type        = string
}

variable "kms_key_arn" {
  description = "KMS key that encrypts the topic (its policy must admit CloudWatch and EventBridge)."
  type        = string
}

variable "email_addresses" {
  description = "Addresses subscribed to the alarm topic by e-mail (each must confirm); empty for none."
  type        = list(string)
  default     = []
}

variable "tags" {
  description = "Tags applied to every resource of the module."
  type        = map(string)
  default     = {}
}
