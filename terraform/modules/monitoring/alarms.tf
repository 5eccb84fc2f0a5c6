locals {
  alarm_actions = [var.alarm_topic_arn]
}

resource "aws_cloudwatch_metric_alarm" "error_rate" {
  alarm_name          = "${var.name}-5xx-rate"
  alarm_description   = "More than ${var.error_rate_threshold_percent}% of API requests answered 5xx. Runbook: docs/operations.md#5xx-rate"
  comparison_operator = "GreaterThanThreshold"
  threshold           = var.error_rate_threshold_percent
  evaluation_periods  = 5
  datapoints_to_alarm = 3
  treat_missing_data  = "notBreaching"
  alarm_actions       = local.alarm_actions
  ok_actions          = local.alarm_actions
  tags                = var.tags

  metric_query {
    id          = "rate"
    label       = "5xx % of requests"
    return_data = true
    expression  = "IF(requests >= ${var.error_rate_min_requests_per_minute}, 100 * (FILL(target5xx, 0) + FILL(alb5xx, 0)) / requests, 0)"
  }

  metric_query {
    id = "requests"

    metric {
      namespace   = "AWS/ApplicationELB"
      metric_name = "RequestCount"
      dimensions  = { LoadBalancer = var.alb_arn_suffix }
      period      = 60
      stat        = "Sum"
    }
  }

  metric_query {
    id = "target5xx"

    metric {
      namespace   = "AWS/ApplicationELB"
      metric_name = "HTTPCode_Target_5XX_Count"
      dimensions  = { LoadBalancer = var.alb_arn_suffix }
      period      = 60
      stat        = "Sum"
    }
  }

  metric_query {
    id = "alb5xx"

    metric {
      namespace   = "AWS/ApplicationELB"
      metric_name = "HTTPCode_ELB_5XX_Count"
      dimensions  = { LoadBalancer = var.alb_arn_suffix }
      period      = 60
      stat        = "Sum"
    }
  }
}

resource "aws_cloudwatch_metric_alarm" "publish_latency" {
  alarm_name          = "${var.name}-publish-latency-p99"
  alarm_description   = "p99 publish latency above ${var.publish_p99_threshold_seconds}s. Runbook: docs/operations.md#publish-latency-p99"
  namespace           = "AWS/ApplicationELB"
  metric_name         = "TargetResponseTime"
  extended_statistic  = "p99"
  period              = 60
  comparison_operator = "GreaterThanThreshold"
  threshold           = var.publish_p99_threshold_seconds
  evaluation_periods  = 5
  datapoints_to_alarm = 3
  treat_missing_data  = "notBreaching"
  alarm_actions       = local.alarm_actions
  ok_actions          = local.alarm_actions
  tags                = var.tags

  dimensions = {
    LoadBalancer = var.alb_arn_suffix
    TargetGroup  = var.target_group_arn_suffixes["publish"]
  }
}

# The ADOT sidecar writes the gauge with the Service dimension alone as well, so
# Maximum over that series is the oldest backlog across every subscription.
resource "aws_cloudwatch_metric_alarm" "oldest_unacked" {
  alarm_name          = "${var.name}-oldest-unacked-age"
  alarm_description   = "A subscription's oldest unacknowledged message is older than ${var.oldest_unacked_threshold_seconds}s. Runbook: docs/operations.md#oldest-unacked-message-age"
  namespace           = var.metrics_namespace
  metric_name         = "lakepubsub_subscription_oldest_unacked_age_seconds"
  statistic           = "Maximum"
  period              = 60
  comparison_operator = "GreaterThanThreshold"
  threshold           = var.oldest_unacked_threshold_seconds
  evaluation_periods  = 5
  datapoints_to_alarm = 5
  treat_missing_data  = "notBreaching"
  alarm_actions       = local.alarm_actions
  ok_actions          = local.alarm_actions
  tags                = var.tags

  dimensions = {
    Service = var.name
  }
}

resource "aws_cloudwatch_metric_alarm" "job_failures" {
  alarm_name          = "${var.name}-job-failures"
  alarm_description   = "A maintenance job (compact, truncate, gc) failed or could not be started. Runbook: docs/operations.md#job-failures"
  comparison_operator = "GreaterThanOrEqualToThreshold"
  threshold           = 1
  evaluation_periods  = 1
  treat_missing_data  = "notBreaching"
  alarm_actions       = local.alarm_actions
  ok_actions          = local.alarm_actions
  tags                = var.tags

  metric_query {
    id          = "failures"
    label       = "failed or unstarted job runs"
    return_data = true
    expression  = "FILL(failed, 0) + FILL(unstarted, 0)"
  }

  metric_query {
    id = "failed"

    metric {
      namespace   = "AWS/Events"
      metric_name = "TriggeredRules"
      dimensions  = { RuleName = var.failed_runs_rule_name }
      period      = 300
      stat        = "Sum"
    }
  }

  metric_query {
    id = "unstarted"

    metric {
      namespace   = "AWS/Scheduler"
      metric_name = "InvocationsSentToDeadLetterCount"
      dimensions  = { ScheduleGroup = var.schedule_group_name }
      period      = 300
      stat        = "Sum"
    }
  }
}

resource "aws_cloudwatch_metric_alarm" "unhealthy_tasks" {
  alarm_name          = "${var.name}-unhealthy-tasks"
  alarm_description   = "API tasks fail the ALB readiness check (/readyz: lake unreachable). Runbook: docs/operations.md#unhealthy-tasks"
  namespace           = "AWS/ApplicationELB"
  metric_name         = "UnHealthyHostCount"
  statistic           = "Maximum"
  period              = 60
  comparison_operator = "GreaterThanThreshold"
  threshold           = 0
  evaluation_periods  = 5
  datapoints_to_alarm = 5
  treat_missing_data  = "notBreaching"
  alarm_actions       = local.alarm_actions
  ok_actions          = local.alarm_actions
  tags                = var.tags

  dimensions = {
    LoadBalancer = var.alb_arn_suffix
    TargetGroup  = var.target_group_arn_suffixes["default"]
  }
}
