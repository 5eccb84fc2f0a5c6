# Push delivery runs inside the API tasks and needs no AWS permission of its own:
# its signing key reaches the container through the execution role's secret
# read, and its POSTs go to the subscribers' endpoints. So there is no push role.

data "aws_iam_policy_document" "ecs_tasks_trust" {
  statement {
    actions = ["sts:AssumeRole"]

    principals {
      type        = "Service"
      identifiers = ["ecs-tasks.amazonaws.com"]
    }

    condition {
      test     = "StringEquals"
      variable = "aws:SourceAccount"
      values   = [local.account_id]
    }

    condition {
      test     = "ArnLike"
      variable = "aws:SourceArn"
      values   = ["arn:${local.partition}:ecs:${local.region}:${local.account_id}:*"]
    }
  }
}

resource "aws_iam_role" "api_task" {
  name               = "${var.name}-api-task"
  description        = "lakepubsub API (and push delivery): read/write under the lake prefix, write metrics records"
  assume_role_policy = data.aws_iam_policy_document.ecs_tasks_trust.json
  tags               = var.tags
}

data "aws_iam_policy_document" "api_task" {
  source_policy_documents = [data.aws_iam_policy_document.lake_read_write.json]

  statement {
    sid       = "WriteEmbeddedMetricRecords"
    actions   = ["logs:CreateLogStream", "logs:PutLogEvents", "logs:DescribeLogStreams"]
    resources = ["${var.metrics_log_group_arn}:*"]
  }
}

resource "aws_iam_role_policy" "api_task" {
  name   = "lake-and-metrics"
  role   = aws_iam_role.api_task.id
  policy = data.aws_iam_policy_document.api_task.json
}

resource "aws_iam_role" "api_execution" {
  name               = "${var.name}-api-execution"
  description        = "ECS agent for the lakepubsub API: pull the image, write logs, inject the two secrets"
  assume_role_policy = data.aws_iam_policy_document.ecs_tasks_trust.json
  tags               = var.tags
}

data "aws_iam_policy_document" "api_execution" {
  statement {
    sid = "PullApiImage"
    actions = [
      "ecr:BatchCheckLayerAvailability",
      "ecr:BatchGetImage",
      "ecr:GetDownloadUrlForLayer",
    ]
    resources = [var.api_repository_arn]
  }

  statement {
    # GetAuthorizationToken has no resource-level permissions.
    sid       = "EcrLogin"
    actions   = ["ecr:GetAuthorizationToken"]
    resources = ["*"]
  }

  statement {
    sid       = "WriteContainerLogs"
    actions   = ["logs:CreateLogStream", "logs:PutLogEvents"]
    resources = ["${var.api_log_group_arn}:*"]
  }

  statement {
    sid       = "ReadServiceSecrets"
    actions   = ["secretsmanager:GetSecretValue"]
    resources = [var.api_keys_secret_arn, var.push_signing_key_secret_arn]
  }

  statement {
    sid       = "DecryptSecretsThroughSecretsManagerOnly"
    actions   = ["kms:Decrypt"]
    resources = [var.kms_key_arn]

    condition {
      test     = "StringEquals"
      variable = "kms:ViaService"
      values   = ["secretsmanager.${local.region}.amazonaws.com"]
    }
  }
}

resource "aws_iam_role_policy" "api_execution" {
  name   = "image-logs-secrets"
  role   = aws_iam_role.api_execution.id
  policy = data.aws_iam_policy_document.api_execution.json
}
