# The smallest useful deployment: two API tasks, jobs on EMR Serverless with the
# default schedules, no WAF and no access logs. Open to the internet on 443;
# every request still needs an API key.
module "lakepubsub" {
  source = "../.."

  name               = "lakepubsub-dev"
  vpc_id             = var.vpc_id
  public_subnet_ids  = var.public_subnet_ids
  private_subnet_ids = var.private_subnet_ids
  ingress_cidrs      = ["0.0.0.0/0"]
  certificate_arn    = var.certificate_arn
  lake_bucket_name   = var.lake_bucket_name
  api_image_tag      = var.image_tag
  jobs_image_tag     = var.image_tag

  # A dev stack is torn down often.
  alb_deletion_protection = false
}
