"""The web console at ``/console``: topics, subscriptions, messages, snapshots, schemas
and the lake, rendered on the server with Jinja2 and charts drawn as SVG
(docs/console.md)."""

from api.console import actions, lake_pages, snapshot_pages, subscription_pages, topic_pages
from api.console.web import install

__all__ = [
    "actions",
    "install",
    "lake_pages",
    "snapshot_pages",
    "subscription_pages",
    "topic_pages",
]
