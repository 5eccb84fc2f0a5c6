variable "name" {
  description = "Deployment name; prefixes the dashboard and alarm names and is the Service dimension of the service metrics."
  type        = string
}

variable "alarm_topic_arn" {
  description = "SNS topic notified when an alarm fires and when it clears."
  type        = string
}

variable "alb_arn_suffix" {
  description = "ARN suffix of the API load balancer."
  type        = string
}

variable "target_group_arn_suffixes" {
  description = "ARN suffixes of the API target groups by role (default, publish)."
  type        = map(string)
}

variable "cluster_name" {
  description = "ECS cluster of the API service."
  type        = string
}

variable "service_name" {
  description = "ECS service of the API."
  type        = string
}

variable "metrics_namespace" {
  description = "CloudWatch namespace the ADOT sidecar writes the service's Prometheus metrics to."
  type        = string
  default     = "LakePubSub"
}

variable "schedule_group_name" {
  description = "EventBridge Scheduler group of the job schedules."
  type        = string
}

variable "failed_runs_rule_name" {
  description = "EventBridge rule that matches failed job runs."
  type        = string
}

variable "error_rate_threshold_percent" {
  description = "5xx responses (target and ALB) as a percentage of requests above which the 5xx alarm fires."
  type        = number
  default     = 1
}

variable "error_rate_min_requests_per_minute" {
  description = "Minutes with fewer requests than this never count toward the 5xx alarm (one error in three requests is noise)."
  type        = number
  default     = 50
}

variable "publish_p99_threshold_seconds" {
  description = "p99 of publish response time at the ALB above which the latency alarm fires."
  type        = number
  default     = 1
}

variable "oldest_unacked_threshold_seconds" {
  description = "Age of the oldest unacknowledged message of any subscription above which the backlog alarm fires."
  type        = number
  default     = 900
}

variable "tags" {
  description = "Tags applied to every resource of the module."
  type        = map(string)
  default     = {}
}
