# Sized for ~20,000 msgs/s of 1 KiB messages published in batches over a few
# dozen topic partitions, with the lake around 1-5 TB (docs/operations.md,
# sizing). Images are deployed by digest.
module "lakepubsub" {
  source = "../.."

  name = "lakepubsub"
  tags = { Environment = "production" }

  vpc_id             = var.vpc_id
  public_subnet_ids  = var.public_subnet_ids
  private_subnet_ids = var.private_subnet_ids
  ingress_cidrs      = var.client_cidrs

  certificate_arn          = var.certificate_arn
  waf_web_acl_arn          = var.waf_web_acl_arn
  alb_access_logs_bucket   = var.log_bucket_name
  alb_idle_timeout_seconds = 120

  lake_bucket_name                       = var.lake_bucket_name
  lake_prefix                            = "lake"
  lake_versioning_enabled                = true
  lake_noncurrent_version_retention_days = 14
  lake_access_log_bucket                 = var.log_bucket_name

  api_image_tag  = var.api_image_digest
  jobs_image_tag = var.jobs_image_digest

  # 2 vCPU tasks with one uvicorn worker per vCPU.
  api_cpu                          = 2048
  api_memory                       = 4096
  api_workers                      = 2
  api_min_tasks                    = 3
  api_max_tasks                    = 24
  api_cpu_target_percent           = 55
  api_requests_per_task_per_minute = 9000

  jobs_runtime = "emr_serverless"
  job_schedules = {
    compact  = "rate(5 minutes)"
    truncate = "rate(10 minutes)"
    gc       = "cron(17 * * * ? *)"
  }
  emr_max_capacity = {
    cpu    = "64 vCPU"
    memory = "256 GB"
    disk   = "1000 GB"
  }
  emr_idle_stop_minutes = 30

  log_retention_days           = 400
  alarm_emails                 = var.oncall_emails
  alarm_error_rate_percent     = 0.5
  alarm_publish_p99_seconds    = 0.75
  alarm_oldest_unacked_seconds = 600
}
