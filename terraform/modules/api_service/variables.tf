variable "name" {
  description = "Deployment name; names the ECS cluster, service, task family and security group."
  type        = string
}

variable "vpc_id" {
  description = "VPC of the API tasks."
  type        = string
}

variable "subnet_ids" {
  description = "Private subnets of the API tasks; they need a route to S3, ECR, Secrets Manager and CloudWatch (NAT or VPC endpoints)."
  type        = list(string)
}

variable "alb_security_group_id" {
  description = "Security group of the load balancer; the only source allowed to reach the tasks."
  type        = string
}

variable "target_group_arns" {
  description = "Target groups the service registers its tasks with, by role (default, publish)."
  type        = map(string)
}

variable "alb_arn_suffix" {
  description = "ARN suffix of the load balancer, for request-count autoscaling."
  type        = string
}

variable "target_group_arn_suffixes" {
  description = "ARN suffixes of the target groups by role, for request-count autoscaling."
  type        = map(string)
}

variable "image" {
  description = "Full API image reference (repository URL and tag or digest)."
  type        = string
}

variable "container_port" {
  description = "Port `lakepubsub serve` listens on."
  type        = number
  default     = 8085
}

variable "peer_port" {
  description = "First of the 64 ports the API processes call each other on (LAKEPUBSUB_PEER_PORT); each worker takes the next free one."
  type        = number
  default     = 9100
}

variable "cpu" {
  description = "Fargate task CPU units (1024 = 1 vCPU)."
  type        = number
  default     = 1024
}

variable "memory" {
  description = "Fargate task memory in MiB."
  type        = number
  default     = 2048
}

variable "workers" {
  description = "uvicorn worker processes per task (`--workers`); one per vCPU."
  type        = number
  default     = 1
}

variable "cpu_architecture" {
  description = "CPU architecture of the tasks: X86_64 or ARM64 (the image must match)."
  type        = string
  default     = "X86_64"
}

variable "lake_uri" {
  description = "LAKEPUBSUB_LAKE, e.g. s3://bucket/lake."
  type        = string
}

variable "allow_anonymous" {
  description = "LAKEPUBSUB_ALLOW_ANONYMOUS; false makes every request present an API key."
  type        = bool
  default     = false
}

variable "api_keys_secret_arn" {
  description = "Secret injected as LAKEPUBSUB_API_KEYS."
  type        = string
}

variable "push_signing_key_secret_arn" {
  description = "Secret injected as LAKEPUBSUB_PUSH_SIGNING_KEY."
  type        = string
}

variable "task_role_arn" {
  description = "Role the API containers run as."
  type        = string
}

variable "execution_role_arn" {
  description = "Role the ECS agent uses to pull the image, write logs and read the secrets."
  type        = string
}

variable "api_log_group_name" {
  description = "Log group of the API and sidecar containers."
  type        = string
}

variable "metrics_log_group_name" {
  description = "Log group the ADOT sidecar writes embedded-metric-format records to."
  type        = string
}

variable "metrics_namespace" {
  description = "CloudWatch namespace of the service's Prometheus metrics."
  type        = string
  default     = "LakePubSub"
}

variable "adot_image" {
  description = "AWS Distro for OpenTelemetry collector image that scrapes /metrics and writes EMF records."
  type        = string
}

variable "egress_cidrs" {
  description = "IPv4 CIDR blocks the tasks may reach on 443: AWS APIs (S3, ECR, Secrets Manager, CloudWatch) and push endpoints."
  type        = list(string)
  default     = ["0.0.0.0/0"]
}

variable "min_tasks" {
  description = "Fewest running tasks (autoscaling floor); 2 or more spreads across AZs."
  type        = number
  default     = 2
}

variable "max_tasks" {
  description = "Most running tasks (autoscaling ceiling)."
  type        = number
  default     = 10
}

variable "cpu_target_percent" {
  description = "Average CPU utilisation the service scales to hold."
  type        = number
  default     = 60
}

variable "requests_per_task_per_minute" {
  description = "ALB requests per task per minute the service scales to hold, per target group."
  type        = number
  default     = 6000
}

variable "container_insights" {
  description = "Container Insights level of the cluster: enhanced, enabled or disabled."
  type        = string
  default     = "enabled"
}

variable "tags" {
  description = "Tags applied to every resource of the module."
  type        = map(string)
  default     = {}
}
