data "aws_region" "current" {}

resource "aws_ecs_cluster" "this" {
  name = var.name
  tags = var.tags

  setting {
    name  = "containerInsights"
    value = var.container_insights
  }
}

resource "aws_security_group" "tasks" {
  name        = "${var.name}-api-tasks"
  description = "lakepubsub API tasks: the ALB in, HTTPS out"
  vpc_id      = var.vpc_id
  tags        = var.tags
}

resource "aws_vpc_security_group_ingress_rule" "from_alb" {
  security_group_id            = aws_security_group.tasks.id
  description                  = "API port from the load balancer only"
  referenced_security_group_id = var.alb_security_group_id
  ip_protocol                  = "tcp"
  from_port                    = var.container_port
  to_port                      = var.container_port
}

resource "aws_vpc_security_group_egress_rule" "alb_to_tasks" {
  security_group_id            = var.alb_security_group_id
  description                  = "Load balancer to the API tasks"
  referenced_security_group_id = aws_security_group.tasks.id
  ip_protocol                  = "tcp"
  from_port                    = var.container_port
  to_port                      = var.container_port
}

# Peering (docs/architecture.md): the API processes of all tasks hand each topic's
# commits to one of them over gRPC, on a port range of their own, task to task.
resource "aws_vpc_security_group_ingress_rule" "peers_in" {
  security_group_id            = aws_security_group.tasks.id
  description                  = "Peer calls from the other API tasks"
  referenced_security_group_id = aws_security_group.tasks.id
  ip_protocol                  = "tcp"
  from_port                    = var.peer_port
  to_port                      = var.peer_port + 63
}

resource "aws_vpc_security_group_egress_rule" "peers_out" {
  security_group_id            = aws_security_group.tasks.id
  description                  = "Peer calls to the other API tasks"
  referenced_security_group_id = aws_security_group.tasks.id
  ip_protocol                  = "tcp"
  from_port                    = var.peer_port
  to_port                      = var.peer_port + 63
}

resource "aws_vpc_security_group_egress_rule" "https_out" {
  for_each = toset(var.egress_cidrs)

  security_group_id = aws_security_group.tasks.id
  description       = "HTTPS to AWS APIs and push endpoints (${each.value})"
  cidr_ipv4         = each.value
  ip_protocol       = "tcp"
  from_port         = 443
  to_port           = 443
}

locals {
  region = data.aws_region.current.name

  health_probe = "import sys, urllib.request; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:${var.container_port}/healthz', timeout=2).status == 200 else 1)"

  adot_config = templatefile("${path.module}/adot-config.yaml.tftpl", {
    port      = var.container_port
    service   = var.name
    namespace = var.metrics_namespace
    log_group = var.metrics_log_group_name
    region    = local.region
  })

  containers = [
    {
      name                   = "api"
      image                  = var.image
      essential              = true
      readonlyRootFilesystem = true
      user                   = "10001:10001"
      command                = ["serve", "--host", "0.0.0.0", "--port", tostring(var.container_port), "--workers", tostring(var.workers)]
      portMappings           = [{ containerPort = var.container_port, protocol = "tcp" }]
      # In-flight group commits finish before the process exits.
      stopTimeout = 30
      environment = [
        { name = "LAKEPUBSUB_LAKE", value = var.lake_uri },
        { name = "LAKEPUBSUB_ALLOW_ANONYMOUS", value = tostring(var.allow_anonymous) },
        { name = "AWS_REGION", value = local.region },
        { name = "LAKEPUBSUB_PEER_HOST", value = "0.0.0.0" },
        { name = "LAKEPUBSUB_PEER_PORT", value = tostring(var.peer_port) },
      ]
      secrets = [
        { name = "LAKEPUBSUB_API_KEYS", valueFrom = var.api_keys_secret_arn },
        { name = "LAKEPUBSUB_PUSH_SIGNING_KEY", valueFrom = var.push_signing_key_secret_arn },
      ]
      mountPoints = [{ sourceVolume = "tmp", containerPath = "/tmp", readOnly = false }]
      healthCheck = {
        command     = ["CMD", "python", "-c", local.health_probe]
        interval    = 15
        timeout     = 5
        retries     = 3
        startPeriod = 20
      }
      linuxParameters = { initProcessEnabled = true }
      ulimits         = [{ name = "nofile", softLimit = 65536, hardLimit = 65536 }]
      logConfiguration = {
        logDriver = "awslogs"
        options = {
          awslogs-group         = var.api_log_group_name
          awslogs-region        = local.region
          awslogs-stream-prefix = "api"
        }
      }
    },
    {
      name                   = "adot"
      image                  = var.adot_image
      essential              = false
      readonlyRootFilesystem = true
      environment            = [{ name = "AOT_CONFIG_CONTENT", value = local.adot_config }]
      dependsOn              = [{ containerName = "api", condition = "START" }]
      logConfiguration = {
        logDriver = "awslogs"
        options = {
          awslogs-group         = var.api_log_group_name
          awslogs-region        = local.region
          awslogs-stream-prefix = "adot"
        }
      }
    },
  ]
}

resource "aws_ecs_task_definition" "api" {
  family                   = "${var.name}-api"
  requires_compatibilities = ["FARGATE"]
  network_mode             = "awsvpc"
  cpu                      = var.cpu
  memory                   = var.memory
  task_role_arn            = var.task_role_arn
  execution_role_arn       = var.execution_role_arn
  container_definitions    = jsonencode(local.containers)
  tags                     = var.tags

  runtime_platform {
    operating_system_family = "LINUX"
    cpu_architecture        = var.cpu_architecture
  }

  volume {
    name = "tmp"
  }
}

resource "aws_ecs_service" "api" {
  name                               = "${var.name}-api"
  cluster                            = aws_ecs_cluster.this.id
  task_definition                    = aws_ecs_task_definition.api.arn
  desired_count                      = var.min_tasks
  launch_type                        = "FARGATE"
  platform_version                   = "LATEST"
  health_check_grace_period_seconds  = 30
  enable_execute_command             = false
  propagate_tags                     = "SERVICE"
  deployment_minimum_healthy_percent = 100
  deployment_maximum_percent         = 200
  tags                               = var.tags

  deployment_circuit_breaker {
    enable   = true
    rollback = true
  }

  network_configuration {
    subnets          = var.subnet_ids
    security_groups  = [aws_security_group.tasks.id]
    assign_public_ip = false
  }

  dynamic "load_balancer" {
    for_each = var.target_group_arns

    content {
      target_group_arn = load_balancer.value
      container_name   = "api"
      container_port   = var.container_port
    }
  }

  lifecycle {
    # Autoscaling owns the task count once the service exists.
    ignore_changes = [desired_count]
  }
}

resource "aws_appautoscaling_target" "api" {
  service_namespace  = "ecs"
  resource_id        = "service/${aws_ecs_cluster.this.name}/${aws_ecs_service.api.name}"
  scalable_dimension = "ecs:service:DesiredCount"
  min_capacity       = var.min_tasks
  max_capacity       = var.max_tasks
  tags               = var.tags
}

resource "aws_appautoscaling_policy" "cpu" {
  name               = "${var.name}-api-cpu"
  policy_type        = "TargetTrackingScaling"
  service_namespace  = aws_appautoscaling_target.api.service_namespace
  resource_id        = aws_appautoscaling_target.api.resource_id
  scalable_dimension = aws_appautoscaling_target.api.scalable_dimension

  target_tracking_scaling_policy_configuration {
    target_value       = var.cpu_target_percent
    scale_in_cooldown  = 300
    scale_out_cooldown = 60

    predefined_metric_specification {
      predefined_metric_type = "ECSServiceAverageCPUUtilization"
    }
  }
}

# One policy per target group: the service scales out when either the publish
# or the other traffic per task exceeds the target, and in only when both allow.
resource "aws_appautoscaling_policy" "requests" {
  for_each = var.target_group_arn_suffixes

  name               = "${var.name}-api-requests-${each.key}"
  policy_type        = "TargetTrackingScaling"
  service_namespace  = aws_appautoscaling_target.api.service_namespace
  resource_id        = aws_appautoscaling_target.api.resource_id
  scalable_dimension = aws_appautoscaling_target.api.scalable_dimension

  target_tracking_scaling_policy_configuration {
    target_value       = var.requests_per_task_per_minute
    scale_in_cooldown  = 300
    scale_out_cooldown = 60

    predefined_metric_specification {
      predefined_metric_type = "ALBRequestCountPerTarget"
      resource_label         = "${var.alb_arn_suffix}/${each.value}"
    }
  }
}
