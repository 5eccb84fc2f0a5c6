output "api_log_group_name" {
  description = "Log group of the API containers."
  value       = aws_cloudwatch_log_group.this["api"].name
}

output "api_log_group_arn" {
  description = "ARN of the API log group."
  value       = aws_cloudwatch_log_group.this["api"].arn
}

output "metrics_log_group_name" {
  description = "Log group receiving embedded-metric-format records."
  value       = aws_cloudwatch_log_group.this["metrics"].name
}

output "metrics_log_group_arn" {
  description = "ARN of the metrics log group."
  value       = aws_cloudwatch_log_group.this["metrics"].arn
}

output "jobs_log_group_name" {
  description = "Log group of the Spark jobs."
  value       = aws_cloudwatch_log_group.this["jobs"].name
}

output "jobs_log_group_arn" {
  description = "ARN of the jobs log group."
  value       = aws_cloudwatch_log_group.this["jobs"].arn
}
