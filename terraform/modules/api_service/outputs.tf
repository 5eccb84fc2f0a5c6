output "cluster_name" {
  description = "ECS cluster name."
  value       = aws_ecs_cluster.this.name
}

output "cluster_arn" {
  description = "ECS cluster ARN (the ECS jobs runtime runs its tasks here too)."
  value       = aws_ecs_cluster.this.arn
}

output "service_name" {
  description = "ECS service name of the API."
  value       = aws_ecs_service.api.name
}

output "task_security_group_id" {
  description = "Security group of the API tasks."
  value       = aws_security_group.tasks.id
}
