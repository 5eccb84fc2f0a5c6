output "api_endpoint" {
  description = "HTTPS endpoint of the API."
  value       = module.lakepubsub.api_endpoint
}

output "lake_uri" {
  description = "LAKEPUBSUB_LAKE of the deployment."
  value       = module.lakepubsub.lake_uri
}

output "api_repository_url" {
  description = "Where to push the API image."
  value       = module.lakepubsub.api_repository_url
}

output "jobs_repository_url" {
  description = "Where to push the jobs image."
  value       = module.lakepubsub.jobs_repository_url
}

output "secrets" {
  description = "Secrets to fill before the API tasks can start."
  value = {
    api_keys         = module.lakepubsub.api_keys_secret_arn
    push_signing_key = module.lakepubsub.push_signing_key_secret_arn
  }
}
