output "api_repository_url" {
  description = "URL of the API image repository (push <url>:<tag>)."
  value       = aws_ecr_repository.this["api"].repository_url
}

output "api_repository_arn" {
  description = "ARN of the API image repository."
  value       = aws_ecr_repository.this["api"].arn
}

output "jobs_repository_url" {
  description = "URL of the jobs image repository (push <url>:<tag>)."
  value       = aws_ecr_repository.this["jobs"].repository_url
}

output "jobs_repository_arn" {
  description = "ARN of the jobs image repository."
  value       = aws_ecr_repository.this["jobs"].arn
}
