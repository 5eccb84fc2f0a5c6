data "aws_caller_identity" "current" {}
data "aws_region" "current" {}
data "aws_partition" "current" {}

locals {
  repositories = toset(["api", "jobs"])
}

resource "aws_ecr_repository" "this" {
  for_each = local.repositories

  name                 = "${var.name}/${each.key}"
  image_tag_mutability = "IMMUTABLE"

  image_scanning_configuration {
    scan_on_push = true
  }

  encryption_configuration {
    encryption_type = "KMS"
    kms_key         = var.kms_key_arn
  }

  tags = var.tags
}

resource "aws_ecr_lifecycle_policy" "this" {
  for_each = aws_ecr_repository.this

  repository = each.value.name
  policy = jsonencode({
    rules = [{
      rulePriority = 1
      description  = "Keep the ${var.images_to_keep} most recent images"
      selection = {
        tagStatus   = "any"
        countType   = "imageCountMoreThan"
        countNumber = var.images_to_keep
      }
      action = { type = "expire" }
    }]
  })
}

# EMR Serverless pulls a custom image with its service principal, not with the
# job role, so the repository itself must let it in (for this account's
# applications only).
data "aws_iam_policy_document" "emr_serverless_pull" {
  statement {
    sid = "EmrServerlessCustomImagePull"
    actions = [
      "ecr:BatchGetImage",
      "ecr:DescribeImages",
      "ecr:GetDownloadUrlForLayer",
    ]

    principals {
      type        = "Service"
      identifiers = ["emr-serverless.amazonaws.com"]
    }

    condition {
      test     = "ArnLike"
      variable = "aws:SourceArn"
      values = [
        "arn:${data.aws_partition.current.partition}:emr-serverless:${data.aws_region.current.name}:${data.aws_caller_identity.current.account_id}:/applications/*",
      ]
    }
  }
}

resource "aws_ecr_repository_policy" "jobs" {
  repository = aws_ecr_repository.this["jobs"].name
  policy     = data.aws_iam_policy_document.emr_serverless_pull.json
}
