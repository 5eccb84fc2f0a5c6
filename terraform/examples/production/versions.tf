terraform {
  required_version = ">= 1.10"

  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = ">= 5.80, < 7.0"
    }
  }

  # Partial configuration: terraform init -backend-config=backend.hcl
  # (bucket, key, region). S3-native state locking needs no DynamoDB table.
  backend "s3" {
    encrypt      = true
    use_lockfile = true
  }
}

provider "aws" {
  region = var.region

  default_tags {
    tags = {
      CostCenter = var.cost_center
      Owner      = "platform"
    }
  }
}
