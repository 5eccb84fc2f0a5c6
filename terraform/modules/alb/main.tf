resource "aws_security_group" "alb" {
  name        = "${var.name}-alb"
  description = "lakepubsub ALB: HTTPS from the allowed CIDRs; egress to the API tasks is added by the api_service module"
  vpc_id      = var.vpc_id
  tags        = var.tags
}

resource "aws_vpc_security_group_ingress_rule" "https" {
  for_each = toset(var.ingress_cidrs)

  security_group_id = aws_security_group.alb.id
  description       = "HTTPS from ${each.value}"
  cidr_ipv4         = each.value
  ip_protocol       = "tcp"
  from_port         = 443
  to_port           = 443
}

resource "aws_vpc_security_group_ingress_rule" "http_redirect" {
  #checkov:skip=CKV_AWS_260:Port 80 is answered only by the listener that 301-redirects to HTTPS; clients that type http:// get told where to go, nothing is served.
  for_each = toset(var.ingress_cidrs)

  security_group_id = aws_security_group.alb.id
  description       = "HTTP from ${each.value}, answered only with a redirect to HTTPS"
  cidr_ipv4         = each.value
  ip_protocol       = "tcp"
  from_port         = 80
  to_port           = 80
}

resource "aws_lb" "this" {
  #checkov:skip=CKV2_AWS_76:WAF is attached through waf_web_acl_arn when the platform has a web ACL; the service authenticates every request with API keys itself.
  #checkov:skip=CKV2_AWS_28:Same: WAF is optional and attached through waf_web_acl_arn.
  #checkov:skip=CKV_AWS_150:Deletion protection defaults to on (var.deletion_protection); only the throwaway minimal example turns it off.
  #checkov:skip=CKV_AWS_91:Access logging is wired below and on when access_logs_bucket is set; the log bucket is account infrastructure.
  name                       = var.name
  load_balancer_type         = "application"
  internal                   = var.internal
  security_groups            = [aws_security_group.alb.id]
  subnets                    = var.subnet_ids
  idle_timeout               = var.idle_timeout_seconds
  drop_invalid_header_fields = true
  enable_deletion_protection = var.deletion_protection
  tags                       = var.tags

  dynamic "access_logs" {
    for_each = var.access_logs_bucket == null ? [] : [var.access_logs_bucket]

    content {
      bucket  = access_logs.value
      prefix  = "alb/${var.name}"
      enabled = true
    }
  }
}

# Two target groups over the same tasks: publishes get their own so that the
# ALB measures publish latency (TargetResponseTime p99) separately from pulls.
locals {
  target_groups = {
    default = "${var.name}-api"
    publish = "${var.name}-publish"
  }
}

resource "aws_lb_target_group" "this" {
  #checkov:skip=CKV_AWS_378:TLS ends at the ALB; the hop to the tasks stays inside the VPC's private subnets, limited by security groups to the ALB.
  for_each = local.target_groups

  name                 = each.value
  port                 = var.target_port
  protocol             = "HTTP"
  target_type          = "ip"
  vpc_id               = var.vpc_id
  deregistration_delay = 30
  tags                 = var.tags

  health_check {
    # readyz checks that the lake is reachable; liveness (/healthz) is the
    # container health check, which restarts the task instead.
    path                = "/readyz"
    matcher             = "200"
    interval            = 15
    timeout             = 5
    healthy_threshold   = 2
    unhealthy_threshold = 3
  }
}

resource "aws_lb_listener" "https" {
  load_balancer_arn = aws_lb.this.arn
  port              = 443
  protocol          = "HTTPS"
  ssl_policy        = var.ssl_policy
  certificate_arn   = var.certificate_arn
  tags              = var.tags

  default_action {
    type             = "forward"
    target_group_arn = aws_lb_target_group.this["default"].arn
  }
}

resource "aws_lb_listener_rule" "publish" {
  listener_arn = aws_lb_listener.https.arn
  priority     = 10
  tags         = var.tags

  action {
    type             = "forward"
    target_group_arn = aws_lb_target_group.this["publish"].arn
  }

  condition {
    path_pattern {
      values = ["/v1/projects/*/topics/*:publish"]
    }
  }
}

resource "aws_lb_listener" "http_redirect" {
  #checkov:skip=CKV_AWS_2:This listener only answers with a 301 to HTTPS; no request is forwarded over plain HTTP.
  #checkov:skip=CKV_AWS_103:Same: the plain-HTTP listener carries no traffic, it only redirects.
  load_balancer_arn = aws_lb.this.arn
  port              = 80
  protocol          = "HTTP"
  tags              = var.tags

  default_action {
    type = "redirect"

    redirect {
      port        = "443"
      protocol    = "HTTPS"
      status_code = "HTTP_301"
    }
  }
}

resource "aws_wafv2_web_acl_association" "this" {
  count = var.waf_web_acl_arn == null ? 0 : 1

  resource_arn = aws_lb.this.arn
  web_acl_arn  = var.waf_web_acl_arn
}
