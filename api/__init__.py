"""The REST API: Google Cloud Pub/Sub v1 over the lakepubsub engine."""
