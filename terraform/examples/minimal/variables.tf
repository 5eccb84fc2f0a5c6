variable "region" {
  description = "AWS region to deploy into."
  type        = string
  default     = "eu-west-1"
}

variable "vpc_id" {
  description = "Existing VPC."
  type        = string
}

variable "public_subnet_ids" {
  description = "Public subnets (two or more AZs) for the load balancer."
  type        = list(string)
}

variable "private_subnet_ids" {
  description = "Private subnets with a NAT gateway for the API tasks and Spark workers."
  type        = list(string)
}

variable "certificate_arn" {
  description = "ACM certificate of the API's host name."
  type        = string
}

variable "lake_bucket_name" {
  description = "Globally unique name for the new lake bucket."
  type        = string
}

variable "image_tag" {
  description = "Tag of the API and jobs images pushed to the repositories this deployment creates."
  type        = string
}
