output "dns_name" {
  description = "DNS name of the load balancer (point the API's DNS record at it)."
  value       = aws_lb.this.dns_name
}

output "zone_id" {
  description = "Route 53 zone of the load balancer, for an alias record."
  value       = aws_lb.this.zone_id
}

output "arn_suffix" {
  description = "ARN suffix of the load balancer (CloudWatch LoadBalancer dimension)."
  value       = aws_lb.this.arn_suffix
}

output "security_group_id" {
  description = "Security group of the load balancer."
  value       = aws_security_group.alb.id
}

output "target_group_arns" {
  description = "Target groups by role: default (every route) and publish."
  value       = { for k, tg in aws_lb_target_group.this : k => tg.arn }
}

output "target_group_arn_suffixes" {
  description = "ARN suffixes of the target groups (CloudWatch TargetGroup dimension), by role."
  value       = { for k, tg in aws_lb_target_group.this : k => tg.arn_suffix }
}
