variable "name" {
  description = "Deployment name; repositories are <name>/api and <name>/jobs."
  type        = string
}

variable "kms_key_arn" {
  description = "KMS key that encrypts the images at rest."
  type        = string
}

variable "images_to_keep" {
  description = "Number of most recent images kept per repository; older ones expire."
  type        = number
  default     = 30
}

variable "tags" {
  description = "Tags applied to every resource of the module."
  type        = map(string)
  default     = {}
}
