# The one S3 grant of the deployment, shared by the API and the jobs: objects
# under the lake prefix, and listing only below it. Nothing else in the bucket.
data "aws_iam_policy_document" "lake_read_write" {
  statement {
    sid       = "ListLakePrefixOnly"
    actions   = ["s3:ListBucket"]
    resources = [var.lake_bucket_arn]

    condition {
      test     = "StringLike"
      variable = "s3:prefix"
      # object_store always lists with a trailing "/", and a bare "lake" would
      # also list sibling prefixes such as "lake-backup".
      values = ["${var.lake_prefix}/*"]
    }
  }

  statement {
    sid = "ReadWriteLakeObjects"
    actions = [
      "s3:GetObject",
      "s3:PutObject",
      "s3:DeleteObject",
      "s3:AbortMultipartUpload",
      "s3:ListMultipartUploadParts",
    ]
    resources = ["${var.lake_bucket_arn}/${var.lake_prefix}/*"]
  }

  statement {
    sid       = "UseLakeKeyThroughS3Only"
    actions   = ["kms:Decrypt", "kms:GenerateDataKey"]
    resources = [var.kms_key_arn]

    condition {
      test     = "StringEquals"
      variable = "kms:ViaService"
      values   = ["s3.${local.region}.amazonaws.com"]
    }

    condition {
      test     = "StringEquals"
      variable = "kms:EncryptionContext:aws:s3:arn"
      values   = [var.lake_bucket_arn]
    }
  }
}
