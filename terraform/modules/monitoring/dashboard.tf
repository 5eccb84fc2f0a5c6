data "aws_region" "current" {}

locals {
  region = data.aws_region.current.name
  ns     = var.metrics_namespace
  lb     = var.alb_arn_suffix
  tg     = var.target_group_arn_suffixes

  # SEARCH keeps per-subscription and per-table graphs current as they come and go.
  per_subscription = "{${local.ns},Service,subscription} Service=\"${var.name}\""
  per_table        = "{${local.ns},Service,table} Service=\"${var.name}\""

  widgets = [
    {
      type = "metric", x = 0, y = 0, width = 8, height = 6
      properties = {
        title  = "Requests per minute"
        region = local.region
        stat   = "Sum"
        period = 60
        metrics = [
          ["AWS/ApplicationELB", "RequestCount", "TargetGroup", local.tg["default"], "LoadBalancer", local.lb, { label = "other routes" }],
          ["AWS/ApplicationELB", "RequestCount", "TargetGroup", local.tg["publish"], "LoadBalancer", local.lb, { label = "publish" }],
          ["AWS/ApplicationELB", "RequestCount", "LoadBalancer", local.lb, { label = "all" }],
        ]
      }
    },
    {
      type = "metric", x = 8, y = 0, width = 8, height = 6
      properties = {
        title  = "5xx per minute"
        region = local.region
        stat   = "Sum"
        period = 60
        metrics = [
          ["AWS/ApplicationELB", "HTTPCode_Target_5XX_Count", "LoadBalancer", local.lb, { label = "from tasks" }],
          ["AWS/ApplicationELB", "HTTPCode_ELB_5XX_Count", "LoadBalancer", local.lb, { label = "from ALB (no healthy task, timeouts)" }],
        ]
      }
    },
    {
      type = "metric", x = 16, y = 0, width = 8, height = 6
      properties = {
        title  = "Publish latency at the ALB (s)"
        region = local.region
        period = 60
        metrics = [
          ["AWS/ApplicationELB", "TargetResponseTime", "TargetGroup", local.tg["publish"], "LoadBalancer", local.lb, { stat = "p50", label = "p50" }],
          ["...", { stat = "p99", label = "p99" }],
        ]
        annotations = { horizontal = [{ label = "alarm", value = var.publish_p99_threshold_seconds }] }
      }
    },
    {
      type = "metric", x = 0, y = 6, width = 8, height = 6
      properties = {
        title  = "Messages per minute"
        region = local.region
        stat   = "Sum"
        period = 60
        metrics = [
          [local.ns, "lakepubsub_published_messages_total", "Service", var.name, { label = "published" }],
          [local.ns, "lakepubsub_delivered_messages_total", "Service", var.name, { label = "delivered" }],
          [local.ns, "lakepubsub_acked_messages_total", "Service", var.name, { label = "acked" }],
        ]
      }
    },
    {
      type = "metric", x = 8, y = 6, width = 8, height = 6
      properties = {
        title  = "Delta commits and conflicts per minute, by table"
        region = local.region
        metrics = [
          [{ expression = "SEARCH('${local.per_table} MetricName=\"lakepubsub_delta_commits_total\"', 'Sum', 60)", id = "commits", label = "commits" }],
          [{ expression = "SEARCH('${local.per_table} MetricName=\"lakepubsub_commit_conflicts_total\"', 'Sum', 60)", id = "conflicts", label = "conflicts" }],
        ]
      }
    },
    {
      type = "metric", x = 16, y = 6, width = 8, height = 6
      properties = {
        title  = "Delta commit latency (s)"
        region = local.region
        period = 60
        metrics = [
          [local.ns, "lakepubsub_commit_seconds", "Service", var.name, { stat = "Average", label = "average" }],
          ["...", { stat = "Maximum", label = "max" }],
        ]
      }
    },
    {
      type = "metric", x = 0, y = 12, width = 12, height = 6
      properties = {
        title  = "Backlog (messages) by subscription"
        region = local.region
        metrics = [
          [{ expression = "SEARCH('${local.per_subscription} MetricName=\"lakepubsub_subscription_backlog_messages\"', 'Maximum', 60)", id = "backlog" }],
        ]
      }
    },
    {
      type = "metric", x = 12, y = 12, width = 12, height = 6
      properties = {
        title  = "Oldest unacked message age (s) by subscription"
        region = local.region
        metrics = [
          [{ expression = "SEARCH('${local.per_subscription} MetricName=\"lakepubsub_subscription_oldest_unacked_age_seconds\"', 'Maximum', 60)", id = "age" }],
        ]
        annotations = { horizontal = [{ label = "alarm", value = var.oldest_unacked_threshold_seconds }] }
      }
    },
    {
      type = "metric", x = 0, y = 18, width = 8, height = 6
      properties = {
        title  = "API tasks: CPU and memory (%)"
        region = local.region
        stat   = "Average"
        period = 60
        metrics = [
          ["AWS/ECS", "CPUUtilization", "ClusterName", var.cluster_name, "ServiceName", var.service_name, { label = "CPU" }],
          ["AWS/ECS", "MemoryUtilization", "ClusterName", var.cluster_name, "ServiceName", var.service_name, { label = "memory" }],
        ]
      }
    },
    {
      type = "metric", x = 8, y = 18, width = 8, height = 6
      properties = {
        title  = "API tasks: healthy and unhealthy"
        region = local.region
        stat   = "Maximum"
        period = 60
        metrics = [
          ["AWS/ApplicationELB", "HealthyHostCount", "TargetGroup", local.tg["default"], "LoadBalancer", local.lb, { label = "healthy" }],
          ["AWS/ApplicationELB", "UnHealthyHostCount", "TargetGroup", local.tg["default"], "LoadBalancer", local.lb, { label = "unhealthy" }],
        ]
      }
    },
    {
      type = "metric", x = 16, y = 18, width = 8, height = 6
      properties = {
        title  = "Maintenance jobs: failed and unstarted runs"
        region = local.region
        stat   = "Sum"
        period = 300
        metrics = [
          ["AWS/Events", "TriggeredRules", "RuleName", var.failed_runs_rule_name, { label = "failed runs" }],
          ["AWS/Scheduler", "InvocationsSentToDeadLetterCount", "ScheduleGroup", var.schedule_group_name, { label = "unstarted (dead-lettered)" }],
          ["AWS/Scheduler", "TargetErrorCount", "ScheduleGroup", var.schedule_group_name, { label = "start errors (retried)" }],
        ]
      }
    },
  ]
}

resource "aws_cloudwatch_dashboard" "this" {
  dashboard_name = var.name
  dashboard_body = jsonencode({ widgets = local.widgets })
}
