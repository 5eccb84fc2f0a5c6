data "aws_caller_identity" "current" {}
data "aws_region" "current" {}
data "aws_partition" "current" {}

locals {
  region = data.aws_region.current.name
  family = "${var.name}-jobs"
}

resource "aws_security_group" "tasks" {
  #checkov:skip=CKV2_AWS_5:Attached to each job task through the schedule's RunTask input (NetworkConfiguration), which checkov does not follow.
  name        = "${var.name}-jobs"
  description = "lakepubsub job tasks: no inbound, HTTPS out"
  vpc_id      = var.vpc_id
  tags        = var.tags
}

resource "aws_vpc_security_group_egress_rule" "https_out" {
  for_each = toset(var.egress_cidrs)

  security_group_id = aws_security_group.tasks.id
  description       = "HTTPS to S3, ECR and CloudWatch Logs (${each.value})"
  cidr_ipv4         = each.value
  ip_protocol       = "tcp"
  from_port         = 443
  to_port           = 443
}

resource "aws_ecs_task_definition" "jobs" {
  family                   = local.family
  requires_compatibilities = ["FARGATE"]
  network_mode             = "awsvpc"
  cpu                      = var.cpu
  memory                   = var.memory
  task_role_arn            = var.task_role_arn
  execution_role_arn       = var.execution_role_arn
  tags                     = var.tags

  runtime_platform {
    operating_system_family = "LINUX"
    cpu_architecture        = var.cpu_architecture
  }

  ephemeral_storage {
    size_in_gib = var.ephemeral_storage_gib
  }

  volume {
    name = "scratch"
  }

  container_definitions = jsonencode([{
    name                   = "jobs"
    image                  = var.image
    essential              = true
    readonlyRootFilesystem = true
    command                = ["compact", "--lake", var.lake_uri]
    environment = [
      { name = "LAKEPUBSUB_LAKE", value = var.lake_uri },
      { name = "AWS_REGION", value = local.region },
    ]
    # Spark's local dirs and Python's temp files; the root filesystem stays read-only.
    mountPoints     = [{ sourceVolume = "scratch", containerPath = "/tmp", readOnly = false }]
    linuxParameters = { initProcessEnabled = true }
    logConfiguration = {
      logDriver = "awslogs"
      options = {
        awslogs-group         = var.log_group_name
        awslogs-region        = local.region
        awslogs-stream-prefix = "jobs"
      }
    }
  }])
}
