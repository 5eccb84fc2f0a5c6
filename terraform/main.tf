locals {
  tags     = merge({ Application = "lakepubsub", Deployment = var.name }, var.tags)
  lake_uri = "s3://${module.lake_bucket.bucket_name}/${var.lake_prefix}"
}

module "kms" {
  source = "./modules/kms"

  name = var.name
  tags = local.tags
}

module "lake_bucket" {
  source = "./modules/lake_bucket"

  bucket_name                       = var.lake_bucket_name
  lake_prefix                       = var.lake_prefix
  enforce_conditional_commits       = var.lake_enforce_conditional_commits
  kms_key_arn                       = module.kms.key_arn
  versioning_enabled                = var.lake_versioning_enabled
  noncurrent_version_retention_days = var.lake_noncurrent_version_retention_days
  access_log_bucket                 = var.lake_access_log_bucket
  tags                              = local.tags
}

module "ecr" {
  source = "./modules/ecr"

  name        = var.name
  kms_key_arn = module.kms.key_arn
  tags        = local.tags
}

module "secrets" {
  source = "./modules/secrets"

  name        = var.name
  kms_key_arn = module.kms.key_arn
  tags        = local.tags
}

module "logs" {
  source = "./modules/logs"

  name           = var.name
  kms_key_arn    = module.kms.key_arn
  retention_days = var.log_retention_days
  tags           = local.tags
}

module "iam" {
  source = "./modules/iam"

  name                        = var.name
  lake_bucket_arn             = module.lake_bucket.bucket_arn
  lake_prefix                 = var.lake_prefix
  kms_key_arn                 = module.kms.key_arn
  api_keys_secret_arn         = module.secrets.api_keys_secret_arn
  push_signing_key_secret_arn = module.secrets.push_signing_key_secret_arn
  api_log_group_arn           = module.logs.api_log_group_arn
  metrics_log_group_arn       = module.logs.metrics_log_group_arn
  jobs_log_group_arn          = module.logs.jobs_log_group_arn
  api_repository_arn          = module.ecr.api_repository_arn
  jobs_repository_arn         = module.ecr.jobs_repository_arn
  jobs_runtime                = var.jobs_runtime
  tags                        = local.tags
}

module "alb" {
  source = "./modules/alb"

  name                 = var.name
  vpc_id               = var.vpc_id
  subnet_ids           = var.public_subnet_ids
  internal             = var.alb_internal
  ingress_cidrs        = var.ingress_cidrs
  certificate_arn      = var.certificate_arn
  idle_timeout_seconds = var.alb_idle_timeout_seconds
  deletion_protection  = var.alb_deletion_protection
  access_logs_bucket   = var.alb_access_logs_bucket
  waf_web_acl_arn      = var.waf_web_acl_arn
  tags                 = local.tags
}

module "api_service" {
  source = "./modules/api_service"

  name                         = var.name
  vpc_id                       = var.vpc_id
  subnet_ids                   = var.private_subnet_ids
  alb_security_group_id        = module.alb.security_group_id
  target_group_arns            = module.alb.target_group_arns
  alb_arn_suffix               = module.alb.arn_suffix
  target_group_arn_suffixes    = module.alb.target_group_arn_suffixes
  image                        = "${module.ecr.api_repository_url}${startswith(var.api_image_tag, "@") ? "" : ":"}${var.api_image_tag}"
  cpu                          = var.api_cpu
  memory                       = var.api_memory
  workers                      = var.api_workers
  cpu_architecture             = var.cpu_architecture
  lake_uri                     = local.lake_uri
  allow_anonymous              = var.allow_anonymous
  api_keys_secret_arn          = module.secrets.api_keys_secret_arn
  push_signing_key_secret_arn  = module.secrets.push_signing_key_secret_arn
  task_role_arn                = module.iam.api_task_role_arn
  execution_role_arn           = module.iam.api_execution_role_arn
  api_log_group_name           = module.logs.api_log_group_name
  metrics_log_group_name       = module.logs.metrics_log_group_name
  adot_image                   = var.adot_image
  egress_cidrs                 = var.egress_cidrs
  min_tasks                    = var.api_min_tasks
  max_tasks                    = var.api_max_tasks
  cpu_target_percent           = var.api_cpu_target_percent
  requests_per_task_per_minute = var.api_requests_per_task_per_minute
  container_insights           = var.container_insights
  tags                         = local.tags
}

module "alerts" {
  source = "./modules/alerts"

  name            = var.name
  kms_key_arn     = module.kms.key_arn
  email_addresses = var.alarm_emails
  tags            = local.tags
}

locals {
  jobs_image = "${module.ecr.jobs_repository_url}${startswith(var.jobs_image_tag, "@") ? "" : ":"}${var.jobs_image_tag}"
}

module "jobs_emr_serverless" {
  source = "./modules/jobs_emr_serverless"
  count  = var.jobs_runtime == "emr_serverless" ? 1 : 0

  name                = var.name
  release_label       = var.emr_release_label
  architecture        = var.cpu_architecture
  image_uri           = local.jobs_image
  vpc_id              = var.vpc_id
  subnet_ids          = var.private_subnet_ids
  egress_cidrs        = var.egress_cidrs
  max_capacity        = var.emr_max_capacity
  idle_stop_minutes   = var.emr_idle_stop_minutes
  job_role_arn        = module.iam.jobs_role_arn
  lake_uri            = local.lake_uri
  log_group_name      = module.logs.jobs_log_group_name
  schedules           = var.job_schedules
  schedule_timezone   = var.job_schedule_timezone
  job_timeout_minutes = var.job_timeout_minutes
  spark_conf          = var.emr_spark_conf
  kms_key_arn         = module.kms.key_arn
  alarm_topic_arn     = module.alerts.topic_arn
  tags                = local.tags
}

module "jobs_ecs" {
  source = "./modules/jobs_ecs"
  count  = var.jobs_runtime == "ecs" ? 1 : 0

  name               = var.name
  cluster_arn        = module.api_service.cluster_arn
  vpc_id             = var.vpc_id
  subnet_ids         = var.private_subnet_ids
  egress_cidrs       = var.egress_cidrs
  image              = local.jobs_image
  cpu                = var.ecs_job_cpu
  memory             = var.ecs_job_memory
  cpu_architecture   = var.cpu_architecture
  task_role_arn      = module.iam.jobs_role_arn
  execution_role_arn = module.iam.jobs_execution_role_arn
  lake_uri           = local.lake_uri
  log_group_name     = module.logs.jobs_log_group_name
  schedules          = var.job_schedules
  schedule_timezone  = var.job_schedule_timezone
  kms_key_arn        = module.kms.key_arn
  alarm_topic_arn    = module.alerts.topic_arn
  tags               = local.tags
}

locals {
  jobs = var.jobs_runtime == "emr_serverless" ? {
    schedule_group_name   = module.jobs_emr_serverless[0].schedule_group_name
    failed_runs_rule_name = module.jobs_emr_serverless[0].failed_runs_rule_name
    dead_letter_queue_arn = module.jobs_emr_serverless[0].dead_letter_queue_arn
    } : {
    schedule_group_name   = module.jobs_ecs[0].schedule_group_name
    failed_runs_rule_name = module.jobs_ecs[0].failed_runs_rule_name
    dead_letter_queue_arn = module.jobs_ecs[0].dead_letter_queue_arn
  }
}

module "monitoring" {
  source = "./modules/monitoring"

  name                             = var.name
  alarm_topic_arn                  = module.alerts.topic_arn
  alb_arn_suffix                   = module.alb.arn_suffix
  target_group_arn_suffixes        = module.alb.target_group_arn_suffixes
  cluster_name                     = module.api_service.cluster_name
  service_name                     = module.api_service.service_name
  schedule_group_name              = local.jobs.schedule_group_name
  failed_runs_rule_name            = local.jobs.failed_runs_rule_name
  error_rate_threshold_percent     = var.alarm_error_rate_percent
  publish_p99_threshold_seconds    = var.alarm_publish_p99_seconds
  oldest_unacked_threshold_seconds = var.alarm_oldest_unacked_seconds
  tags                             = local.tags
}
