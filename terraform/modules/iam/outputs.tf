output "api_task_role_arn" {
  description = "Role the API containers (and push delivery) run as."
  value       = aws_iam_role.api_task.arn
}

output "api_execution_role_arn" {
  description = "Role the ECS agent uses to start API tasks."
  value       = aws_iam_role.api_execution.arn
}

output "jobs_role_arn" {
  description = "Role the Spark jobs run as (EMR Serverless job execution role, or ECS task role)."
  value       = aws_iam_role.jobs.arn
}

output "jobs_execution_role_arn" {
  description = "Role the ECS agent uses to start job tasks; null unless jobs_runtime is \"ecs\"."
  value       = one(aws_iam_role.jobs_execution[*].arn)
}
