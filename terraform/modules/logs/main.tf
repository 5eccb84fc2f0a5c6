locals {
  groups = {
    api     = "API containers' stdout/stderr"
    metrics = "Embedded-metric-format records from the ADOT sidecar (become LakePubSub metrics)"
    jobs    = "Spark maintenance jobs (driver and executors)"
  }
}

resource "aws_cloudwatch_log_group" "this" {
  for_each = local.groups

  name              = "/${var.name}/${each.key}"
  retention_in_days = var.retention_days
  kms_key_id        = var.kms_key_arn
  tags              = merge(var.tags, { Purpose = each.value })
}
