data "aws_iam_policy_document" "jobs_trust" {
  statement {
    actions = ["sts:AssumeRole"]

    principals {
      type        = "Service"
      identifiers = [var.jobs_runtime == "ecs" ? "ecs-tasks.amazonaws.com" : "emr-serverless.amazonaws.com"]
    }

    condition {
      test     = "StringEquals"
      variable = "aws:SourceAccount"
      values   = [local.account_id]
    }

    condition {
      test     = "ArnLike"
      variable = "aws:SourceArn"
      values = [
        var.jobs_runtime == "ecs"
        ? "arn:${local.partition}:ecs:${local.region}:${local.account_id}:*"
        : "arn:${local.partition}:emr-serverless:${local.region}:${local.account_id}:/applications/*",
      ]
    }
  }
}

resource "aws_iam_role" "jobs" {
  name               = "${var.name}-jobs"
  description        = "lakepubsub Spark jobs (compact, truncate, gc): read/write/delete under the lake prefix, write job logs"
  assume_role_policy = data.aws_iam_policy_document.jobs_trust.json
  tags               = var.tags
}

data "aws_iam_policy_document" "jobs" {
  source_policy_documents = [data.aws_iam_policy_document.lake_read_write.json]

  statement {
    sid       = "WriteJobLogs"
    actions   = ["logs:CreateLogStream", "logs:PutLogEvents", "logs:DescribeLogStreams"]
    resources = ["${var.jobs_log_group_arn}:*"]
  }

  statement {
    # EMR Serverless looks the log group up before writing to it; the action is
    # read-only metadata and only resolves against log-group ARNs.
    sid       = "FindJobLogGroup"
    actions   = ["logs:DescribeLogGroups"]
    resources = ["arn:${local.partition}:logs:${local.region}:${local.account_id}:log-group:*"]
  }
}

resource "aws_iam_role_policy" "jobs" {
  name   = "lake-and-logs"
  role   = aws_iam_role.jobs.id
  policy = data.aws_iam_policy_document.jobs.json
}

resource "aws_iam_role" "jobs_execution" {
  count = var.jobs_runtime == "ecs" ? 1 : 0

  name               = "${var.name}-jobs-execution"
  description        = "ECS agent for the lakepubsub jobs: pull the jobs image, write logs"
  assume_role_policy = data.aws_iam_policy_document.ecs_tasks_trust.json
  tags               = var.tags
}

data "aws_iam_policy_document" "jobs_execution" {
  statement {
    sid = "PullJobsImage"
    actions = [
      "ecr:BatchCheckLayerAvailability",
      "ecr:BatchGetImage",
      "ecr:GetDownloadUrlForLayer",
    ]
    resources = [var.jobs_repository_arn]
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
    resources = ["${var.jobs_log_group_arn}:*"]
  }
}

resource "aws_iam_role_policy" "jobs_execution" {
  count = var.jobs_runtime == "ecs" ? 1 : 0

  name   = "image-and-logs"
  role   = aws_iam_role.jobs_execution[0].id
  policy = data.aws_iam_policy_document.jobs_execution.json
}
