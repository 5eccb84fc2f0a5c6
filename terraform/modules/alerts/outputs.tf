output "topic_arn" {
  description = "SNS topic that alarms and job-failure events publish to."
  value       = aws_sns_topic.alarms.arn
}
