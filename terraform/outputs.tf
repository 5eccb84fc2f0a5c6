output "api_endpoint" {
  description = "HTTPS endpoint of the load balancer; point the API's DNS name (matching certificate_arn) at alb_dns_name."
  value       = "https://${module.alb.dns_name}"
}

output "alb_dns_name" {
  description = "DNS name of the API load balancer."
  value       = module.alb.dns_name
}

output "alb_zone_id" {
  description = "Route 53 zone of the load balancer, for an alias record."
  value       = module.alb.zone_id
}

output "lake_uri" {
  description = "LAKEPUBSUB_LAKE of this deployment."
  value       = local.lake_uri
}

output "lake_bucket_name" {
  description = "Name of the lake bucket."
  value       = module.lake_bucket.bucket_name
}

output "kms_key_arn" {
  description = "Customer-managed KMS key of the deployment."
  value       = module.kms.key_arn
}

output "api_repository_url" {
  description = "ECR repository to push the API image to."
  value       = module.ecr.api_repository_url
}

output "jobs_repository_url" {
  description = "ECR repository to push the jobs image to."
  value       = module.ecr.jobs_repository_url
}

output "api_keys_secret_arn" {
  description = "Secret to write LAKEPUBSUB_API_KEYS into."
  value       = module.secrets.api_keys_secret_arn
}

output "push_signing_key_secret_arn" {
  description = "Secret to write LAKEPUBSUB_PUSH_SIGNING_KEY into."
  value       = module.secrets.push_signing_key_secret_arn
}

output "ecs_cluster_name" {
  description = "ECS cluster of the API (and of the jobs when jobs_runtime is \"ecs\")."
  value       = module.api_service.cluster_name
}

output "api_service_name" {
  description = "ECS service of the API."
  value       = module.api_service.service_name
}

output "api_task_role_arn" {
  description = "Role of the API tasks; push delivery runs under it too and has no role of its own."
  value       = module.iam.api_task_role_arn
}

output "jobs_role_arn" {
  description = "Role the maintenance jobs run as."
  value       = module.iam.jobs_role_arn
}

output "emr_serverless_application_id" {
  description = "EMR Serverless application of the jobs; null when jobs_runtime is \"ecs\"."
  value       = one(module.jobs_emr_serverless[*].application_id)
}

output "job_schedule_group" {
  description = "EventBridge Scheduler group of the job schedules."
  value       = local.jobs.schedule_group_name
}

output "job_dead_letter_queue_arn" {
  description = "Queue of schedule invocations that could not start a job."
  value       = local.jobs.dead_letter_queue_arn
}

output "log_groups" {
  description = "CloudWatch log groups by purpose."
  value = {
    api     = module.logs.api_log_group_name
    metrics = module.logs.metrics_log_group_name
    jobs    = module.logs.jobs_log_group_name
  }
}

output "dashboard_name" {
  description = "CloudWatch dashboard of the deployment."
  value       = module.monitoring.dashboard_name
}

output "alarm_topic_arn" {
  description = "SNS topic of the alarms and job-failure events."
  value       = module.alerts.topic_arn
}

output "alarm_names" {
  description = "CloudWatch alarms by purpose."
  value       = module.monitoring.alarm_names
}
