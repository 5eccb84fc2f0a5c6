variable "name" {
  description = "Deployment name; prefixes the load balancer, its security group and target groups."
  type        = string
}

variable "vpc_id" {
  description = "VPC of the load balancer and the API tasks."
  type        = string
}

variable "subnet_ids" {
  description = "Subnets of the load balancer (public subnets for an internet-facing ALB, private for an internal one); at least two AZs."
  type        = list(string)

  validation {
    condition     = length(var.subnet_ids) >= 2
    error_message = "An ALB needs subnets in at least two availability zones."
  }
}

variable "internal" {
  description = "Make the load balancer internal (reachable only inside the VPC and peered networks)."
  type        = bool
  default     = false
}

variable "ingress_cidrs" {
  description = "IPv4 CIDR blocks allowed to reach the load balancer on 443 (and 80, which only redirects)."
  type        = list(string)
}

variable "certificate_arn" {
  description = "ACM certificate for the HTTPS listener."
  type        = string
}

variable "ssl_policy" {
  description = "ALB TLS negotiation policy of the HTTPS listener."
  type        = string
  default     = "ELBSecurityPolicy-TLS13-1-2-2021-06"
}

variable "target_port" {
  description = "Port the API containers listen on."
  type        = number
  default     = 8085
}

variable "idle_timeout_seconds" {
  description = "ALB idle timeout; must exceed the longest pull the clients wait on."
  type        = number
  default     = 120
}

variable "deletion_protection" {
  description = "Refuse to delete the load balancer until this is turned off."
  type        = bool
  default     = true
}

variable "access_logs_bucket" {
  description = "Existing bucket for ALB access logs; null disables them."
  type        = string
  default     = null
}

variable "waf_web_acl_arn" {
  description = "Existing WAFv2 web ACL to associate with the load balancer; null for none."
  type        = string
  default     = null
}

variable "tags" {
  description = "Tags applied to every resource of the module."
  type        = map(string)
  default     = {}
}
