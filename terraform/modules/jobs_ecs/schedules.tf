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
  description        = "EventBridge Scheduler: run lakepubsub job tasks on ECS"
  assume_role_policy = data.aws_iam_policy_document.scheduler_trust.json
  tags               = var.tags
}

data "aws_iam_policy_document" "scheduler" {
  statement {
    sid       = "RunJobTasksInThisCluster"
    actions   = ["ecs:RunTask"]
    resources = ["arn:${data.aws_partition.current.partition}:ecs:${local.region}:${data.aws_caller_identity.current.account_id}:task-definition/${local.family}:*"]

    condition {
      test     = "ArnEquals"
      variable = "ecs:cluster"
      values   = [var.cluster_arn]
    }
  }

  statement {
    sid       = "TagJobTasks"
    actions   = ["ecs:TagResource"]
    resources = ["arn:${data.aws_partition.current.partition}:ecs:${local.region}:${data.aws_caller_identity.current.account_id}:task/*"]

    condition {
      test     = "StringEquals"
      variable = "ecs:CreateAction"
      values   = ["RunTask"]
    }
  }

  statement {
    sid       = "HandRolesToEcsTasks"
    actions   = ["iam:PassRole"]
    resources = [var.task_role_arn, var.execution_role_arn]

    condition {
      test     = "StringEquals"
      variable = "iam:PassedToService"
      values   = ["ecs-tasks.amazonaws.com"]
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
  name   = "run-job-tasks"
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
    arn      = "arn:${data.aws_partition.current.partition}:scheduler:::aws-sdk:ecs:runTask"
    role_arn = aws_iam_role.scheduler.arn

    input = jsonencode({
      Cluster        = var.cluster_arn
      TaskDefinition = aws_ecs_task_definition.jobs.arn_without_revision
      LaunchType     = "FARGATE"
      StartedBy      = "scheduler-${each.key}"
      PropagateTags  = "TASK_DEFINITION"
      NetworkConfiguration = {
        AwsvpcConfiguration = {
          Subnets        = var.subnet_ids
          SecurityGroups = [aws_security_group.tasks.id]
          AssignPublicIp = "DISABLED"
        }
      }
      Overrides = {
        ContainerOverrides = [{ Name = "jobs", Command = [each.key, "--lake", var.lake_uri] }]
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
  description = "A lakepubsub job task stopped with a non-zero exit code"
  tags        = var.tags

  event_pattern = jsonencode({
    source        = ["aws.ecs"]
    "detail-type" = ["ECS Task State Change"]
    detail = {
      clusterArn = [var.cluster_arn]
      group      = ["family:${local.family}"]
      lastStatus = ["STOPPED"]
      containers = { exitCode = [{ "anything-but" = 0 }] }
    }
  })
}

resource "aws_cloudwatch_event_target" "failed_runs" {
  rule = aws_cloudwatch_event_rule.failed_runs.name
  arn  = var.alarm_topic_arn
}
