output "dashboard_name" {
  description = "CloudWatch dashboard of the deployment."
  value       = aws_cloudwatch_dashboard.this.dashboard_name
}

output "alarm_names" {
  description = "CloudWatch alarms of the deployment, by purpose."
  value = {
    error_rate      = aws_cloudwatch_metric_alarm.error_rate.alarm_name
    publish_latency = aws_cloudwatch_metric_alarm.publish_latency.alarm_name
    oldest_unacked  = aws_cloudwatch_metric_alarm.oldest_unacked.alarm_name
    job_failures    = aws_cloudwatch_metric_alarm.job_failures.alarm_name
    unhealthy_tasks = aws_cloudwatch_metric_alarm.unhealthy_tasks.alarm_name
  }
}
