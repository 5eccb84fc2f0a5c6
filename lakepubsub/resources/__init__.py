"""Resources: the catalog and the Pub/Sub resources it holds (topics, subscriptions,
snapshots, IAM policies), their names, labels, filters and list paging."""
