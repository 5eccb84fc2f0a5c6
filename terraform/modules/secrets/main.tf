# Terraform creates the secrets but never their values, so no key material ends
# up in the state file; the operator writes the values (terraform/README.md).
locals {
  secrets = {
    api_keys = {
      suffix      = "api-keys"
      description = "LAKEPUBSUB_API_KEYS: JSON object of API key name to the sha256 hex digest of the key."
    }
    push_signing_key = {
      suffix      = "push-signing-key"
      description = "LAKEPUBSUB_PUSH_SIGNING_KEY: PEM private key that signs push OIDC JWTs."
    }
  }
}

resource "aws_secretsmanager_secret" "this" {
  #checkov:skip=CKV2_AWS_57:Both values are rotated by a documented operator procedure (docs/operations.md): API key hashes are added before old ones are removed, and a new push key must be published to push endpoints' JWKS first; an automatic rotation Lambda cannot do either safely.
  for_each = local.secrets

  name                    = "${var.name}/${each.value.suffix}"
  description             = each.value.description
  kms_key_id              = var.kms_key_arn
  recovery_window_in_days = var.recovery_window_days
  tags                    = var.tags
}
