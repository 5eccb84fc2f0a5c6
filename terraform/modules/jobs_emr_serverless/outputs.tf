output "application_id" {
  description = "EMR Serverless application ID."
  value       = aws_emrserverless_application.this.id
}

output "application_arn" {
  description = "EMR Serverless application ARN."
  value       = aws_emrserverless_application.this.arn
}

output "schedule_group_name" {
  description = "EventBridge Scheduler group holding the job schedules (CloudWatch ScheduleGroup dimension)."
  value       = aws_scheduler_schedule_group.this.name
}

output "failed_runs_rule_name" {
  description = "EventBridge rule matching failed job runs (CloudWatch RuleName dimension)."
  value       = aws_cloudwatch_event_rule.failed_runs.name
}

output "dead_letter_queue_arn" {
  description = "Queue receiving schedule invocations that could not start a job run."
  value       = aws_sqs_queue.dead_letters.arn
}
