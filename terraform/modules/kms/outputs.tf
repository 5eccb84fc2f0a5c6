output "key_arn" {
  description = "ARN of the deployment's customer-managed KMS key."
  value       = aws_kms_key.this.arn
}

output "key_id" {
  description = "ID of the deployment's customer-managed KMS key."
  value       = aws_kms_key.this.key_id
}
