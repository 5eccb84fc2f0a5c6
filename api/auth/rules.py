"""The access rules: the permissions each Pub/Sub method needs (by route name,
shared by both doors), on resources named in its path and in its body."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic.alias_generators import to_snake

from lakepubsub import errors
from lakepubsub.resources import catalog as cat
from lakepubsub.resources.iam import Resource
from lakepubsub.resources.names import SchemaName, SnapshotName, SubscriptionName, TopicName

Check = tuple[str, Resource]
Params = Mapping[str, str]
# A permission needed on a name in the request body: permission, dotted camelCase
# path to the name, its parser, the resource kind.
BodyCheck = tuple[str, str, Callable[[str], Any], str]


def _project(p: Params) -> Resource:
    return Resource("project", p["project"])


def _topic(p: Params) -> Resource:
    return Resource(cat.TOPIC, p["project"], p["topic"])


def _sub(p: Params) -> Resource:
    return Resource(cat.SUBSCRIPTION, p["project"], p["subscription"])


def _snap(p: Params) -> Resource:
    return Resource(cat.SNAPSHOT, p["project"], p["snapshot"])


def _schema(p: Params) -> Resource:
    # A path may name one revision (``s@c7cfa2a8``); permissions are the schema's.
    return Resource("schema", p["project"], p["schema"].partition("@")[0])


def _values(doc: Any, path: str) -> Iterator[Any]:
    """The values at a dotted camelCase path of a JSON body, under either spelling
    of each key that the API accepts (``deadLetterPolicy``, ``dead_letter_policy``)."""
    if not path:
        yield doc
        return
    head, _, rest = path.partition(".")
    if isinstance(doc, dict):
        for key in dict.fromkeys((head, to_snake(head))):
            if key in doc:
                yield from _values(doc[key], rest)


def _body_names(body: Any, path: str, parse: Callable[[str], Any], kind: str) -> list[Resource]:
    out = []
    for value in _values(body, path):
        # A name the route will refuse anyway (missing, malformed) needs no check here.
        if not isinstance(value, str):
            continue
        try:
            name = parse(value)
        except errors.InvalidArgument:
            continue
        out.append(Resource(kind, name.project, name.id))
    return out


@dataclass(frozen=True)
class Rule:
    """The permissions a route needs: on path resources, and on names in its body."""

    path: tuple[tuple[str, Callable[[Params], Resource]], ...] = ()
    body: tuple[BodyCheck, ...] = ()
    special: str = ""  # "detach": on the subscription's topic

    def checks(self, params: Params, body: Any, view: cat.View) -> list[Check]:
        out = [(perm, where(params)) for perm, where in self.path]
        for perm, path, parse, kind in self.body:
            out.extend((perm, resource) for resource in _body_names(body, path, parse, kind))
        if self.special == "detach":
            entry = view.get(cat.SUBSCRIPTION, params["project"], params["subscription"])
            spec = entry.spec if entry else None
            topics = _body_names(spec, "topic", TopicName.parse, cat.TOPIC)
            out.append(
                ("pubsub.topics.detachSubscription", topics[0] if topics else _project(params))
            )
        return out


def _rule(permission: str, where: Callable[[Params], Resource], *body: BodyCheck) -> Rule:
    """One permission on a resource named by the path, and any on names in the body."""
    return Rule(path=((permission, where),), body=body)


_CONSUME = _rule("pubsub.subscriptions.consume", _sub)


def _dead_letter(path: str) -> BodyCheck:
    # Dead-lettering publishes into the dead-letter topic, so naming one needs what
    # publishing to it does (Pub/Sub asks the same of its service agent).
    return ("pubsub.topics.publish", path, TopicName.parse, cat.TOPIC)


def _attach_schema(path: str) -> BodyCheck:
    # Naming a schema in a topic's schemaSettings attaches it (Pub/Sub asks the same).
    return ("pubsub.schemas.attach", path, SchemaName.parse, "schema")


RULES: dict[str, Rule] = {
    "create_topic": _rule(
        "pubsub.topics.create", _project, _attach_schema("schemaSettings.schema")
    ),
    "get_topic": _rule("pubsub.topics.get", _topic),
    "update_topic": _rule(
        "pubsub.topics.update", _topic, _attach_schema("topic.schemaSettings.schema")
    ),
    "delete_topic": _rule("pubsub.topics.delete", _topic),
    "list_topics": _rule("pubsub.topics.list", _project),
    "list_topic_subscriptions": _rule("pubsub.topics.get", _topic),
    "list_topic_snapshots": _rule("pubsub.topics.get", _topic),
    "publish": _rule("pubsub.topics.publish", _topic),
    "create_subscription": _rule(
        "pubsub.subscriptions.create",
        _project,
        ("pubsub.topics.attachSubscription", "topic", TopicName.parse, cat.TOPIC),
        _dead_letter("deadLetterPolicy.deadLetterTopic"),
    ),
    "get_subscription": _rule("pubsub.subscriptions.get", _sub),
    "update_subscription": _rule(
        "pubsub.subscriptions.update",
        _sub,
        _dead_letter("subscription.deadLetterPolicy.deadLetterTopic"),
    ),
    "delete_subscription": _rule("pubsub.subscriptions.delete", _sub),
    "list_subscriptions": _rule("pubsub.subscriptions.list", _project),
    "modify_push_config": _rule("pubsub.subscriptions.update", _sub),
    "pull": _CONSUME,
    "acknowledge": _CONSUME,
    "modify_ack_deadline": _CONSUME,
    "nack": _CONSUME,
    "truncate": _CONSUME,
    "seek": _rule(
        "pubsub.subscriptions.consume",
        _sub,
        ("pubsub.snapshots.seek", "snapshot", SnapshotName.parse, cat.SNAPSHOT),
    ),
    "detach": Rule(special="detach"),
    "create_snapshot": _rule(
        "pubsub.snapshots.create",
        _project,
        ("pubsub.subscriptions.consume", "subscription", SubscriptionName.parse, cat.SUBSCRIPTION),
    ),
    "get_snapshot": _rule("pubsub.snapshots.get", _snap),
    "update_snapshot": _rule("pubsub.snapshots.update", _snap),
    "delete_snapshot": _rule("pubsub.snapshots.delete", _snap),
    "list_snapshots": _rule("pubsub.snapshots.list", _project),
    "create_schema": _rule("pubsub.schemas.create", _project),
    "get_schema": _rule("pubsub.schemas.get", _schema),
    "list_schemas": _rule("pubsub.schemas.list", _project),
    "list_schema_revisions": _rule("pubsub.schemas.listRevisions", _schema),
    "commit_schema": _rule("pubsub.schemas.commit", _schema),
    "rollback_schema": _rule("pubsub.schemas.rollback", _schema),
    "delete_schema_revision": _rule("pubsub.schemas.delete", _schema),
    "delete_schema": _rule("pubsub.schemas.delete", _schema),
    "validate_schema": _rule("pubsub.schemas.validate", _project),
    "validate_message": _rule("pubsub.schemas.validate", _project),
    "project_get_iam_policy": _rule("pubsub.projects.getIamPolicy", _project),
    "project_set_iam_policy": _rule("pubsub.projects.setIamPolicy", _project),
    "project_test_iam_permissions": Rule(),
}
_KIND_PARAMS = {"topic": _topic, "subscription": _sub, "snapshot": _snap}
for _kind, _where in _KIND_PARAMS.items():
    RULES[f"{_kind}_get_iam_policy"] = _rule(f"pubsub.{_kind}s.getIamPolicy", _where)
    RULES[f"{_kind}_set_iam_policy"] = _rule(f"pubsub.{_kind}s.setIamPolicy", _where)
    RULES[f"{_kind}_test_iam_permissions"] = Rule()  # any authenticated caller, as Pub/Sub
BODY_RULES = frozenset(name for name, rule in RULES.items() if rule.body)
