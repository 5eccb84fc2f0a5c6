data "aws_caller_identity" "current" {}
data "aws_region" "current" {}
data "aws_partition" "current" {}

locals {
  region = data.aws_region.current.name

  # The custom image puts the job scripts here and Python 3.11 at this path
  # (docker/jobs.Dockerfile, target emr-serverless).
  jobs_dir = "/opt/lakepubsub/jobs"
  python   = "/usr/bin/python3.11"

  spark_conf = merge({
    "spark.emr-serverless.driverEnv.PYSPARK_PYTHON"        = local.python
    "spark.emr-serverless.driverEnv.PYSPARK_DRIVER_PYTHON" = local.python
    "spark.executorEnv.PYSPARK_PYTHON"                     = local.python
    "spark.emr-serverless.driverEnv.AWS_REGION"            = local.region
    "spark.executorEnv.AWS_REGION"                         = local.region
    "spark.emr-serverless.driverEnv.LAKEPUBSUB_LAKE"       = var.lake_uri
    "spark.executorEnv.LAKEPUBSUB_LAKE"                    = var.lake_uri
  }, var.spark_conf)

  spark_submit_parameters = join(" ", [for k, v in local.spark_conf : "--conf ${k}=${v}"])
}

resource "aws_security_group" "workers" {
  #checkov:skip=CKV2_AWS_5:Attached through the EMR Serverless application's network_configuration, which checkov does not follow.
  name        = "${var.name}-jobs"
  description = "lakepubsub Spark workers on EMR Serverless: no inbound, HTTPS out"
  vpc_id      = var.vpc_id
  tags        = var.tags
}

resource "aws_vpc_security_group_egress_rule" "https_out" {
  for_each = toset(var.egress_cidrs)

  security_group_id = aws_security_group.workers.id
  description       = "HTTPS to S3 and CloudWatch Logs (${each.value})"
  cidr_ipv4         = each.value
  ip_protocol       = "tcp"
  from_port         = 443
  to_port           = 443
}

# Spark's driver and executors talk to each other inside the application.
resource "aws_vpc_security_group_egress_rule" "intra" {
  security_group_id            = aws_security_group.workers.id
  description                  = "Driver and executors of the same job"
  referenced_security_group_id = aws_security_group.workers.id
  ip_protocol                  = "-1"
}

resource "aws_vpc_security_group_ingress_rule" "intra" {
  security_group_id            = aws_security_group.workers.id
  description                  = "Driver and executors of the same job"
  referenced_security_group_id = aws_security_group.workers.id
  ip_protocol                  = "-1"
}

resource "aws_emrserverless_application" "this" {
  name          = var.name
  release_label = var.release_label
  type          = "spark"
  architecture  = var.architecture
  tags          = var.tags

  image_configuration {
    image_uri = var.image_uri
  }

  maximum_capacity {
    cpu    = var.max_capacity.cpu
    memory = var.max_capacity.memory
    disk   = var.max_capacity.disk
  }

  auto_start_configuration {
    enabled = true
  }

  auto_stop_configuration {
    enabled              = true
    idle_timeout_minutes = var.idle_stop_minutes
  }

  network_configuration {
    subnet_ids         = var.subnet_ids
    security_group_ids = [aws_security_group.workers.id]
  }
}
