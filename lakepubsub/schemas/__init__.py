"""Pub/Sub schemas: the registry of schemas and revisions, and the codecs that check
messages against them."""
