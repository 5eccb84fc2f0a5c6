variable "region" {
  description = "AWS region to deploy into."
  type        = string
}

variable "cost_center" {
  description = "Cost center tag of every resource."
  type        = string
}

variable "vpc_id" {
  description = "Existing VPC."
  type        = string
}

variable "public_subnet_ids" {
  description = "Public subnets in three AZs for the load balancer."
  type        = list(string)
}

variable "private_subnet_ids" {
  description = "Private subnets in three AZs for the API tasks and Spark workers."
  type        = list(string)
}

variable "client_cidrs" {
  description = "Networks of the publishers and subscribers allowed to reach the API."
  type        = list(string)
}

variable "certificate_arn" {
  description = "ACM certificate of the API's host name."
  type        = string
}

variable "lake_bucket_name" {
  description = "Globally unique name for the lake bucket."
  type        = string
}

variable "log_bucket_name" {
  description = "Existing bucket receiving S3 server access logs and ALB access logs."
  type        = string
}

variable "waf_web_acl_arn" {
  description = "The platform's regional WAFv2 web ACL for public APIs."
  type        = string
}

variable "api_image_digest" {
  description = "Digest of the API image to run, as \"@sha256:...\" (immutable deploys)."
  type        = string
}

variable "jobs_image_digest" {
  description = "Digest of the jobs image to run, as \"@sha256:...\"."
  type        = string
}

variable "oncall_emails" {
  description = "On-call addresses subscribed to the alarms."
  type        = list(string)
}
