resource "aws_scheduler_schedule_group" "this" {
  name = var.name
  tags = var.tags
}

resource "aws_sqs_queue" "dead_letters" {
  name                      = "${var.name}-job-schedule-dlq"
  message_retention_seconds = 1209600
  sqs_managed_sse_enabled   = true
  tags                      = var.tags
}

data "aws_iam_policy_document" "scheduler_trust" {
  statement {
    actions = ["sts:AssumeRole"]

    principals {
      type        = "Service"
      identifiers = ["scheduler.amazonaws.com"]
    }

    condition {
      test     = "StringEquals"
      variable = "aws:SourceAccount"
      values   = [data.aws_caller_identity.current.account_id]
    }
  }
}

resource "aws_iam_role" "scheduler" {
  name               = "${var.name}-jobs-scheduler"
  description        = "EventBridge Scheduler: start lakepubsub job runs on the EMR Serverless application"
  assume_role_policy = data.aws_iam_policy_document.scheduler_trust.json
  tags               = var.tags
}

data "aws_iam_policy_document" "scheduler" {
  statement {
    sid       = "StartJobRunsOnThisApplication"
    actions   = ["emr-serverless:StartJobRun"]
    resources = [aws_emrserverless_application.this.arn]
  }

  statement {
    sid       = "HandJobRoleToEmrServerless"
    actions   = ["iam:PassRole"]
    resources = [var.job_role_arn]

    condition {
      test     = "StringEquals"
      variable = "iam:PassedToService"
      values   = ["emr-serverless.amazonaws.com"]
    }
  }

  statement {
    sid       = "DecryptOwnSchedules"
    actions   = ["kms:Decrypt"]
    resources = [var.kms_key_arn]

    condition {
      test     = "ArnLike"
      variable = "kms:EncryptionContext:aws:scheduler:schedule:arn"
      values   = ["arn:${data.aws_partition.current.partition}:scheduler:${local.region}:${data.aws_caller_identity.current.account_id}:schedule/${var.name}/*"]
    }
  }

  statement {
    sid       = "DeadLetterUnstartedRuns"
    actions   = ["sqs:SendMessage"]
    resources = [aws_sqs_queue.dead_letters.arn]
  }
}

resource "aws_iam_role_policy" "scheduler" {
  name   = "start-job-runs"
  role   = aws_iam_role.scheduler.id
  policy = data.aws_iam_policy_document.scheduler.json
}

resource "aws_scheduler_schedule" "job" {
  for_each = var.schedules

  name                         = "${var.name}-${each.key}"
  group_name                   = aws_scheduler_schedule_group.this.name
  description                  = "lakepubsub ${each.key} job"
  schedule_expression          = each.value
  schedule_expression_timezone = var.schedule_timezone
  kms_key_arn                  = var.kms_key_arn

  flexible_time_window {
    mode = "OFF"
  }

  target {
    arn      = "arn:${data.aws_partition.current.partition}:scheduler:::aws-sdk:emrserverless:startJobRun"
    role_arn = aws_iam_role.scheduler.arn

    input = jsonencode({
      ApplicationId    = aws_emrserverless_application.this.id
      ExecutionRoleArn = var.job_role_arn
      # One token per scheduled invocation: a retried delivery cannot start a second run.
      ClientToken             = "<aws.scheduler.execution-id>"
      Name                    = "${each.key}-<aws.scheduler.scheduled-time>"
      ExecutionTimeoutMinutes = var.job_timeout_minutes
      JobDriver = {
        SparkSubmit = {
          EntryPoint            = "local://${local.jobs_dir}/${each.key}.py"
          EntryPointArguments   = ["--lake", var.lake_uri]
          SparkSubmitParameters = local.spark_submit_parameters
        }
      }
      ConfigurationOverrides = {
        MonitoringConfiguration = {
          CloudWatchLoggingConfiguration = {
            Enabled             = true
            LogGroupName        = var.log_group_name
            LogStreamNamePrefix = each.key
          }
        }
      }
    })

    retry_policy {
      maximum_event_age_in_seconds = 3600
      maximum_retry_attempts       = 3
    }

    dead_letter_config {
      arn = aws_sqs_queue.dead_letters.arn
    }
  }
}

resource "aws_cloudwatch_event_rule" "failed_runs" {
  name        = "${var.name}-job-run-failed"
  description = "A lakepubsub job run on EMR Serverless ended FAILED"
  tags        = var.tags

  event_pattern = jsonencode({
    source        = ["aws.emr-serverless"]
    "detail-type" = ["EMR Serverless Job Run State Change"]
    detail = {
      applicationId = [aws_emrserverless_application.this.id]
      state         = ["FAILED"]
    }
  })
}

resource "aws_cloudwatch_event_target" "failed_runs" {
  rule = aws_cloudwatch_event_rule.failed_runs.name
  arn  = var.alarm_topic_arn
}
