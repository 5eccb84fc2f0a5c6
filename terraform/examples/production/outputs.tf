output "api_endpoint" {
  description = "HTTPS endpoint of the API."
  value       = module.lakepubsub.api_endpoint
}

output "alb_dns_name" {
  description = "Target of the API's DNS alias record."
  value       = module.lakepubsub.alb_dns_name
}

output "alb_zone_id" {
  description = "Zone of the API's DNS alias record."
  value       = module.lakepubsub.alb_zone_id
}

output "lake_uri" {
  description = "LAKEPUBSUB_LAKE of the deployment."
  value       = module.lakepubsub.lake_uri
}

output "emr_serverless_application_id" {
  description = "EMR Serverless application of the maintenance jobs."
  value       = module.lakepubsub.emr_serverless_application_id
}

output "dashboard_name" {
  description = "CloudWatch dashboard."
  value       = module.lakepubsub.dashboard_name
}

output "alarm_names" {
  description = "CloudWatch alarms."
  value       = module.lakepubsub.alarm_names
}
