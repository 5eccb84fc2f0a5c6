"""Publish: batches, the group committer, the shared intake and the messages table."""
