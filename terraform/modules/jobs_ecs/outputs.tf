output "task_definition_family" {
  description = "Task family of the job tasks."
  value       = aws_ecs_task_definition.jobs.family
}

output "schedule_group_name" {
  description = "EventBridge Scheduler group holding the job schedules (CloudWatch ScheduleGroup dimension)."
  value       = aws_scheduler_schedule_group.this.name
}

output "failed_runs_rule_name" {
  description = "EventBridge rule matching failed job tasks (CloudWatch RuleName dimension)."
  value       = aws_cloudwatch_event_rule.failed_runs.name
}

output "dead_letter_queue_arn" {
  description = "Queue receiving schedule invocations that could not start a job task."
  value       = aws_sqs_queue.dead_letters.arn
}
