output "api_keys_secret_arn" {
  description = "ARN of the secret holding LAKEPUBSUB_API_KEYS."
  value       = aws_secretsmanager_secret.this["api_keys"].arn
}

output "push_signing_key_secret_arn" {
  description = "ARN of the secret holding LAKEPUBSUB_PUSH_SIGNING_KEY."
  value       = aws_secretsmanager_secret.this["push_signing_key"].arn
}
