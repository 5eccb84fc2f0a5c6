"""Pub/Sub REST v1's methods, so that a request for one this server does not build
answers UNIMPLEMENTED (HTTP 501) instead of NOT_FOUND, as Google's API would tell
a method it has from a resource that is missing."""

from __future__ import annotations

import re

# (HTTP verb, path template, method id) of every method of pubsub v1, as the discovery
# document names them; the routes serve the ones that are built.
_METHODS = (
    ("PUT", "topics/{}", "topics.create"),
    ("PATCH", "topics/{}", "topics.patch"),
    ("GET", "topics/{}", "topics.get"),
    ("DELETE", "topics/{}", "topics.delete"),
    ("GET", "topics", "topics.list"),
    ("POST", "topics/{}:publish", "topics.publish"),
    ("GET", "topics/{}/subscriptions", "topics.subscriptions.list"),
    ("GET", "topics/{}/snapshots", "topics.snapshots.list"),
    ("PUT", "subscriptions/{}", "subscriptions.create"),
    ("PATCH", "subscriptions/{}", "subscriptions.patch"),
    ("GET", "subscriptions/{}", "subscriptions.get"),
    ("DELETE", "subscriptions/{}", "subscriptions.delete"),
    ("GET", "subscriptions", "subscriptions.list"),
    ("POST", "subscriptions/{}:acknowledge", "subscriptions.acknowledge"),
    ("POST", "subscriptions/{}:detach", "subscriptions.detach"),
    ("POST", "subscriptions/{}:modifyAckDeadline", "subscriptions.modifyAckDeadline"),
    ("POST", "subscriptions/{}:modifyPushConfig", "subscriptions.modifyPushConfig"),
    ("POST", "subscriptions/{}:pull", "subscriptions.pull"),
    ("POST", "subscriptions/{}:seek", "subscriptions.seek"),
    ("PUT", "snapshots/{}", "snapshots.create"),
    ("PATCH", "snapshots/{}", "snapshots.patch"),
    ("GET", "snapshots/{}", "snapshots.get"),
    ("DELETE", "snapshots/{}", "snapshots.delete"),
    ("GET", "snapshots", "snapshots.list"),
    ("POST", "schemas", "schemas.create"),
    ("GET", "schemas", "schemas.list"),
    ("GET", "schemas/{}", "schemas.get"),
    ("DELETE", "schemas/{}", "schemas.delete"),
    ("POST", "schemas/{}:commit", "schemas.commit"),
    ("POST", "schemas/{}:rollback", "schemas.rollback"),
    ("GET", "schemas/{}:listRevisions", "schemas.listRevisions"),
    ("DELETE", "schemas/{}:deleteRevision", "schemas.deleteRevision"),
    ("POST", "schemas:validate", "schemas.validate"),
    ("POST", "schemas:validateMessage", "schemas.validateMessage"),
    *(
        (verb, f"{kind}/{{}}:{action}", f"{kind}.{action}")
        for kind in ("topics", "subscriptions", "snapshots", "schemas")
        for verb, action in (
            ("GET", "getIamPolicy"),
            ("POST", "setIamPolicy"),
            ("POST", "testIamPermissions"),
        )
    ),
)


def _pattern(template: str) -> re.Pattern[str]:
    parts = (re.escape(part) for part in template.split("{}"))
    return re.compile(r"/v1/projects/[^/:]+/" + "[^/:]+".join(parts))


_COMPILED = tuple((verb, _pattern(template), name) for verb, template, name in _METHODS)


def pubsub_method(verb: str, path: str) -> str | None:
    """The Pub/Sub method (``pubsub.projects.schemas.create``) a request names, if any."""
    for method_verb, pattern, name in _COMPILED:
        if method_verb == verb and pattern.fullmatch(path):
            return f"pubsub.projects.{name}"
    return None
