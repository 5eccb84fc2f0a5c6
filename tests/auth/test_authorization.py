"""Every REST method against every Pub/Sub role, on a real server.

The expected outcome of each call comes from Google Cloud Pub/Sub's documented
access model, written out below independently of the product: the permissions
each predefined role holds, and the permissions each method needs
(https://cloud.google.com/pubsub/docs/access-control). A call is allowed iff the
role holds every permission the method needs; an allowed call must succeed and
take effect, a refused one must answer 403 PERMISSION_DENIED and leave the lake
as it was (read back with the root key).

The roles are granted on the project through the key configuration; grants on
single resources are tested in test_resource_policies.py.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any

import httpx
import pytest
from authkit import ROOT, P, b64, clients, denied, drain, key_config, ok, policy, serving

from api.app import create_app

# -- Google's model ---------------------------------------------------------------------------

VIEW = {
    "pubsub.topics.get",
    "pubsub.topics.list",
    "pubsub.subscriptions.get",
    "pubsub.subscriptions.list",
    "pubsub.snapshots.get",
    "pubsub.snapshots.list",
    "pubsub.schemas.get",
    "pubsub.schemas.list",
    "pubsub.schemas.listRevisions",
}
EDIT = {
    "pubsub.topics.create",
    "pubsub.topics.update",
    "pubsub.topics.delete",
    "pubsub.topics.publish",
    "pubsub.topics.attachSubscription",
    "pubsub.topics.detachSubscription",
    "pubsub.subscriptions.create",
    "pubsub.subscriptions.update",
    "pubsub.subscriptions.delete",
    "pubsub.subscriptions.consume",
    "pubsub.snapshots.create",
    "pubsub.snapshots.update",
    "pubsub.snapshots.delete",
    "pubsub.snapshots.seek",
    # Schemas (https://cloud.google.com/pubsub/docs/create-schemas, "Required permissions").
    "pubsub.schemas.attach",
    "pubsub.schemas.commit",
    "pubsub.schemas.create",
    "pubsub.schemas.delete",
    "pubsub.schemas.rollback",
    "pubsub.schemas.validate",
}
RESOURCE_IAM = {
    f"pubsub.{kind}.{verb}"
    for kind in ("topics", "subscriptions", "snapshots")
    for verb in ("getIamPolicy", "setIamPolicy")
}
# Pub/Sub has no project policy of its own (Resource Manager keeps it); lakepubsub
# keeps one per project and lets roles/pubsub.admin, the role that may change
# access to everything in Pub/Sub, read and write it.
PROJECT_IAM = {"pubsub.projects.getIamPolicy", "pubsub.projects.setIamPolicy"}

ROLE_PERMISSIONS: dict[str, set[str]] = {
    "viewer": VIEW,
    "publisher": {"pubsub.topics.publish"},
    "subscriber": {
        "pubsub.subscriptions.consume",
        "pubsub.topics.attachSubscription",
        "pubsub.snapshots.seek",
    },
    "editor": VIEW | EDIT,
    "admin": VIEW | EDIT | RESOURCE_IAM | PROJECT_IAM,
    "nobody": set(),  # a valid key with no role
}
ROLES = tuple(ROLE_PERMISSIONS)
# Every permission some method below needs.
UNIVERSE = sorted(VIEW | EDIT | RESOURCE_IAM | PROJECT_IAM)


# -- one case: a method called by a role -------------------------------------------------------


@dataclass
class World:
    """One case, read and set up with the root key. ``tag`` names the case; ``base``
    names the resources it works on, which cases that must not change them share."""

    root: httpx.Client
    caller: httpx.Client
    tag: str
    base: str
    ack_id: str = ""

    @property
    def topic(self) -> str:
        return f"t-{self.base}"

    @property
    def sub(self) -> str:
        return f"s-{self.base}"

    @property
    def snap(self) -> str:
        return f"n-{self.base}"

    @property
    def schema(self) -> str:
        return f"sc-{self.base}"

    def make_schema(self) -> None:
        body = {"type": "PROTOCOL_BUFFER", "definition": PROTO}
        ok(self.root.post(f"{P}/schemas", params={"schemaId": self.schema}, json=body))

    def make_revised_schema(self) -> None:
        self.make_schema()
        body = {"schema": {"type": "PROTOCOL_BUFFER", "definition": PROTO}}
        ok(self.root.post(f"{P}/schemas/{self.schema}:commit", json=body))

    def revisions(self) -> list[str]:
        found = self.root.get(f"{P}/schemas/{self.schema}:listRevisions")
        return [s["revisionId"] for s in found.json().get("schemas", [])]

    def new(self, kind: str) -> str:
        """The name of a resource this case creates."""
        return f"{kind[0]}-{self.tag}"

    def path(self, kind: str) -> str:
        return f"projects/demo{self.under_project(kind)}"

    def under_project(self, kind: str) -> str:
        """The resource's path after the project's: ``/topics/t-x``; "" for the project."""
        if kind == "project":
            return ""
        name = {"topic": self.topic, "subscription": self.sub, "snapshot": self.snap}[kind]
        return f"/{kind}s/{name}"

    def make_topic(self) -> None:
        ok(self.root.put(f"{P}/topics/{self.topic}", json={}))

    def make_sub(self) -> None:
        self.make_topic()
        # Leases the root key takes must outlive a slow test.
        body = {"topic": self.path("topic"), "ackDeadlineSeconds": 600}
        ok(self.root.put(f"{P}/subscriptions/{self.sub}", json=body))

    def make_snapshot(self) -> None:
        self.make_sub()
        body = {"subscription": self.path("subscription")}
        ok(self.root.put(f"{P}/snapshots/{self.snap}", json=body))

    def publish(self, text: str) -> None:
        body = {"messages": [{"data": b64(text)}]}
        ok(self.root.post(f"{P}/topics/{self.topic}:publish", json=body))

    def lease(self, text: str) -> None:
        """Publish ``text`` and pull it with the root key: ``ack_id`` holds its lease."""
        self.publish(text)
        got = ok(self.root.post(f"{P}/subscriptions/{self.sub}:pull", json={"maxMessages": 1}))
        (item,) = got["receivedMessages"]
        self.ack_id = item["ackId"]

    def delivered(self) -> list[str]:
        return drain(self.root, P, self.topic, self.sub)

    def get(self, path: str) -> httpx.Response:
        return self.root.get(P + path)

    def fingerprint(self) -> dict[str, Any]:
        """Everything a call of this case could change, as the root key reads it."""
        state: dict[str, Any] = {
            kind: ok(self.root.get(f"{P}/{kind}"))
            for kind in ("topics", "subscriptions", "snapshots")
        }
        state["schemas"] = ok(self.root.get(f"{P}/schemas", params={"view": "FULL"}))
        state["revisions"] = self.revisions()
        for path in (
            "",
            f"/topics/{self.topic}",
            f"/subscriptions/{self.sub}",
            f"/snapshots/{self.snap}",
        ):
            state[path] = self.root.get(f"{P}{path}:getIamPolicy").json()
        return state


def _nothing(_: World) -> None:
    pass


@dataclass(frozen=True)
class Method:
    needs: frozenset[str]  # Google's documented permissions for the call
    resources: Callable[[World], None]  # what the call works on
    call: Callable[[World], httpx.Response]
    # Whether the call's effect is visible (read with the root key); None: read-only.
    took_effect: Callable[[World], bool] | None = None
    state: Callable[[World], None] = _nothing  # set up for each case, on the resources


def _labels(w: World, path: str) -> Any:
    return ok(w.get(path)).get("labels")


def _message(w: World) -> None:
    w.publish("m")


def _lease(w: World) -> None:
    w.lease("m")


def _seek_to_now(w: World) -> httpx.Response:
    now = datetime.datetime.now(datetime.UTC).isoformat().replace("+00:00", "Z")
    return w.caller.post(f"{P}/subscriptions/{w.sub}:seek", json={"time": now})


def _acked_after_snapshot(w: World) -> None:
    # The snapshot was taken before "m" was published; "m" is acknowledged now.
    # Seeking back to the snapshot makes it deliverable again.
    w.lease("m")
    ok(w.root.post(f"{P}/subscriptions/{w.sub}:acknowledge", json={"ackIds": [w.ack_id]}))


def _released_then_delivered(w: World) -> list[str]:
    # Give up the root key's lease on "m": it is delivered again unless acknowledged.
    body = {"ackIds": [w.ack_id], "ackDeadlineSeconds": 0}
    ok(w.root.post(f"{P}/subscriptions/{w.sub}:modifyAckDeadline", json=body))
    return w.delivered()


def _member(w: World) -> str:
    return f"user:{w.tag}@example.com"


def _get_policy(w: World, kind: str) -> httpx.Response:
    return w.caller.get(f"{P}{w.under_project(kind)}:getIamPolicy")


def _set_policy(w: World, kind: str) -> httpx.Response:
    body = policy(("roles/pubsub.viewer", [_member(w)]))
    return w.caller.post(f"{P}{w.under_project(kind)}:setIamPolicy", json=body)


def _policy_was_set(w: World, kind: str) -> bool:
    return _member(w) in str(ok(w.get(f"{w.under_project(kind)}:getIamPolicy")))


def _test_permissions(w: World, kind: str) -> httpx.Response:
    body = {"permissions": UNIVERSE}
    return w.caller.post(f"{P}{w.under_project(kind)}:testIamPermissions", json=body)


PROTO = 'syntax = "proto3"; message M { string a = 1; }'


def _schema_methods() -> dict[str, Method]:
    schema_body = {"type": "PROTOCOL_BUFFER", "definition": PROTO}
    return {
        "create_schema": Method(
            _p("schemas.create"),
            _nothing,
            lambda w: w.caller.post(
                f"{P}/schemas", params={"schemaId": w.new("schema")}, json=schema_body
            ),
            lambda w: w.get(f"/schemas/{w.new('schema')}").status_code == 200,
        ),
        "get_schema": Method(
            _p("schemas.get"), World.make_schema, lambda w: w.caller.get(f"{P}/schemas/{w.schema}")
        ),
        "list_schemas": Method(
            _p("schemas.list"), _nothing, lambda w: w.caller.get(f"{P}/schemas")
        ),
        "list_schema_revisions": Method(
            _p("schemas.listRevisions"),
            World.make_schema,
            lambda w: w.caller.get(f"{P}/schemas/{w.schema}:listRevisions"),
        ),
        "commit_schema": Method(
            _p("schemas.commit"),
            World.make_schema,
            lambda w: w.caller.post(f"{P}/schemas/{w.schema}:commit", json={"schema": schema_body}),
            lambda w: len(w.revisions()) == 2,
        ),
        "rollback_schema": Method(
            _p("schemas.rollback"),
            World.make_schema,
            lambda w: w.caller.post(
                f"{P}/schemas/{w.schema}:rollback", json={"revisionId": w.revisions()[0]}
            ),
            lambda w: len(w.revisions()) == 2,
        ),
        "delete_schema_revision": Method(
            _p("schemas.delete"),
            World.make_revised_schema,
            lambda w: w.caller.delete(f"{P}/schemas/{w.schema}@{w.revisions()[0]}:deleteRevision"),
            lambda w: len(w.revisions()) == 1,
        ),
        "delete_schema": Method(
            _p("schemas.delete"),
            World.make_schema,
            lambda w: w.caller.delete(f"{P}/schemas/{w.schema}"),
            lambda w: w.get(f"/schemas/{w.schema}").status_code == 404,
        ),
        "validate_schema": Method(
            _p("schemas.validate"),
            _nothing,
            lambda w: w.caller.post(f"{P}/schemas:validate", json={"schema": schema_body}),
        ),
        "validate_message": Method(
            _p("schemas.validate"),
            _nothing,
            lambda w: w.caller.post(
                f"{P}/schemas:validateMessage",
                json={"schema": schema_body, "message": b64(""), "encoding": "BINARY"},
            ),
        ),
    }


def _iam_methods() -> dict[str, Method]:
    out: dict[str, Method] = {}
    kinds: dict[str, tuple[str, Callable[[World], None]]] = {
        "topic": ("topics", World.make_topic),
        "subscription": ("subscriptions", World.make_sub),
        "snapshot": ("snapshots", World.make_snapshot),
        "project": ("projects", _nothing),
    }
    for kind, (collection, resources) in kinds.items():
        out[f"{kind}_get_iam_policy"] = Method(
            _p(f"{collection}.getIamPolicy"), resources, partial(_get_policy, kind=kind)
        )
        out[f"{kind}_set_iam_policy"] = Method(
            _p(f"{collection}.setIamPolicy"),
            resources,
            partial(_set_policy, kind=kind),
            partial(_policy_was_set, kind=kind),
        )
        # Needs no permission: any caller may ask which permissions it holds.
        out[f"{kind}_test_iam_permissions"] = Method(
            frozenset(), resources, partial(_test_permissions, kind=kind)
        )
    return out


def _p(*names: str) -> frozenset[str]:
    return frozenset(f"pubsub.{n}" for n in names)


METHODS: dict[str, Method] = {
    # -- topics
    "create_topic": Method(
        _p("topics.create"),
        _nothing,
        lambda w: w.caller.put(f"{P}/topics/{w.new('topic')}", json={}),
        lambda w: w.get(f"/topics/{w.new('topic')}").status_code == 200,
    ),
    "get_topic": Method(
        _p("topics.get"), World.make_topic, lambda w: w.caller.get(f"{P}/topics/{w.topic}")
    ),
    "update_topic": Method(
        _p("topics.update"),
        World.make_topic,
        lambda w: w.caller.patch(
            f"{P}/topics/{w.topic}",
            json={"topic": {"labels": {"case": w.tag}}, "updateMask": "labels"},
        ),
        lambda w: _labels(w, f"/topics/{w.topic}") == {"case": w.tag},
    ),
    "delete_topic": Method(
        _p("topics.delete"),
        World.make_topic,
        lambda w: w.caller.delete(f"{P}/topics/{w.topic}"),
        lambda w: w.get(f"/topics/{w.topic}").status_code == 404,
    ),
    "list_topics": Method(_p("topics.list"), _nothing, lambda w: w.caller.get(f"{P}/topics")),
    "publish": Method(
        _p("topics.publish"),
        World.make_sub,
        lambda w: w.caller.post(
            f"{P}/topics/{w.topic}:publish", json={"messages": [{"data": b64("m")}]}
        ),
        lambda w: w.delivered() == ["m"],
    ),
    "list_topic_subscriptions": Method(
        _p("topics.get"),
        World.make_sub,
        lambda w: w.caller.get(f"{P}/topics/{w.topic}/subscriptions"),
    ),
    "list_topic_snapshots": Method(
        _p("topics.get"),
        World.make_snapshot,
        lambda w: w.caller.get(f"{P}/topics/{w.topic}/snapshots"),
    ),
    # -- subscriptions
    "create_subscription": Method(
        _p("subscriptions.create", "topics.attachSubscription"),
        World.make_topic,
        lambda w: w.caller.put(
            f"{P}/subscriptions/{w.new('subscription')}", json={"topic": w.path("topic")}
        ),
        lambda w: w.get(f"/subscriptions/{w.new('subscription')}").status_code == 200,
    ),
    "get_subscription": Method(
        _p("subscriptions.get"),
        World.make_sub,
        lambda w: w.caller.get(f"{P}/subscriptions/{w.sub}"),
    ),
    "list_subscriptions": Method(
        _p("subscriptions.list"), _nothing, lambda w: w.caller.get(f"{P}/subscriptions")
    ),
    "update_subscription": Method(
        _p("subscriptions.update"),
        World.make_sub,
        lambda w: w.caller.patch(
            f"{P}/subscriptions/{w.sub}",
            json={"subscription": {"labels": {"case": w.tag}}, "updateMask": "labels"},
        ),
        lambda w: _labels(w, f"/subscriptions/{w.sub}") == {"case": w.tag},
    ),
    "delete_subscription": Method(
        _p("subscriptions.delete"),
        World.make_sub,
        lambda w: w.caller.delete(f"{P}/subscriptions/{w.sub}"),
        lambda w: w.get(f"/subscriptions/{w.sub}").status_code == 404,
    ),
    "modify_push_config": Method(
        _p("subscriptions.update"),
        World.make_sub,
        lambda w: w.caller.post(
            f"{P}/subscriptions/{w.sub}:modifyPushConfig",
            json={"pushConfig": {"pushEndpoint": f"https://push.example.com/{w.tag}"}},
        ),
        lambda w: (
            ok(w.get(f"/subscriptions/{w.sub}"))["pushConfig"].get("pushEndpoint")
            == f"https://push.example.com/{w.tag}"
        ),
    ),
    "pull": Method(
        _p("subscriptions.consume"),
        World.make_sub,
        lambda w: w.caller.post(f"{P}/subscriptions/{w.sub}:pull", json={"maxMessages": 10}),
        # The caller's lease keeps "m" from the root key.
        lambda w: w.delivered() == [],
        state=_message,
    ),
    "acknowledge": Method(
        _p("subscriptions.consume"),
        World.make_sub,
        lambda w: w.caller.post(
            f"{P}/subscriptions/{w.sub}:acknowledge", json={"ackIds": [w.ack_id]}
        ),
        lambda w: _released_then_delivered(w) == [],
        state=_lease,
    ),
    "modify_ack_deadline": Method(
        _p("subscriptions.consume"),
        World.make_sub,
        lambda w: w.caller.post(
            f"{P}/subscriptions/{w.sub}:modifyAckDeadline",
            json={"ackIds": [w.ack_id], "ackDeadlineSeconds": 0},
        ),
        lambda w: w.delivered() == ["m"],
        state=_lease,
    ),
    # lakepubsub's nack is Pub/Sub's modifyAckDeadline to 0: the same permission.
    "nack": Method(
        _p("subscriptions.consume"),
        World.make_sub,
        lambda w: w.caller.post(f"{P}/subscriptions/{w.sub}:nack", json={"ackIds": [w.ack_id]}),
        lambda w: w.delivered() == ["m"],
        state=_lease,
    ),
    # lakepubsub's truncate drops the backlog, as a seek to now does: the same permission.
    "truncate": Method(
        _p("subscriptions.consume"),
        World.make_sub,
        lambda w: w.caller.post(f"{P}/subscriptions/{w.sub}:truncate", json={}),
        lambda w: w.delivered() == ["<truncated>"],
        state=_message,
    ),
    "seek_to_time": Method(
        _p("subscriptions.consume"),
        World.make_sub,
        _seek_to_now,
        lambda w: w.delivered() == [],
        state=_message,
    ),
    "seek_to_snapshot": Method(
        _p("subscriptions.consume", "snapshots.seek"),
        World.make_snapshot,
        lambda w: w.caller.post(
            f"{P}/subscriptions/{w.sub}:seek", json={"snapshot": w.path("snapshot")}
        ),
        lambda w: w.delivered() == ["m"],
        state=_acked_after_snapshot,
    ),
    "detach": Method(
        _p("topics.detachSubscription"),
        World.make_sub,
        lambda w: w.caller.post(f"{P}/subscriptions/{w.sub}:detach", json={}),
        lambda w: ok(w.get(f"/subscriptions/{w.sub}"))["detached"] is True,
    ),
    # -- snapshots
    "create_snapshot": Method(
        _p("snapshots.create", "subscriptions.consume"),
        World.make_sub,
        lambda w: w.caller.put(
            f"{P}/snapshots/{w.new('snapshot')}", json={"subscription": w.path("subscription")}
        ),
        lambda w: w.get(f"/snapshots/{w.new('snapshot')}").status_code == 200,
    ),
    "get_snapshot": Method(
        _p("snapshots.get"),
        World.make_snapshot,
        lambda w: w.caller.get(f"{P}/snapshots/{w.snap}"),
    ),
    "list_snapshots": Method(
        _p("snapshots.list"), _nothing, lambda w: w.caller.get(f"{P}/snapshots")
    ),
    "update_snapshot": Method(
        _p("snapshots.update"),
        World.make_snapshot,
        lambda w: w.caller.patch(
            f"{P}/snapshots/{w.snap}",
            json={"snapshot": {"labels": {"case": w.tag}}, "updateMask": "labels"},
        ),
        lambda w: _labels(w, f"/snapshots/{w.snap}") == {"case": w.tag},
    ),
    "delete_snapshot": Method(
        _p("snapshots.delete"),
        World.make_snapshot,
        lambda w: w.caller.delete(f"{P}/snapshots/{w.snap}"),
        lambda w: w.get(f"/snapshots/{w.snap}").status_code == 404,
    ),
    **_schema_methods(),
    **_iam_methods(),
}


# -- the server ---------------------------------------------------------------------------------

KEYS = {
    ROOT: {"roles": {"*": ["roles/pubsub.admin"]}},
    **{role: {"roles": {"demo": [f"roles/pubsub.{role}"]}} for role in ROLES if role != "nobody"},
    "nobody": {},
}


@pytest.fixture(scope="module")
def prepared() -> set[str]:
    """Resources already made, by ``World.base``."""
    return set()


@pytest.fixture(scope="module")
def callers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, httpx.Client]]:
    env = {"LAKEPUBSUB_API_KEYS": key_config(KEYS)}
    with (
        serving(tmp_path_factory.mktemp("authz-lake"), env) as server,
        clients(server, *KEYS) as made,
    ):
        yield made


def _cases() -> Iterator[Any]:
    for name in METHODS:
        for role in ROLES:
            yield pytest.param(name, role, id=f"{name}-{role}")


@pytest.mark.parametrize(("method", "role"), list(_cases()))
def test_method_by_role(
    method: str, role: str, callers: dict[str, httpx.Client], prepared: set[str]
) -> None:
    spec = METHODS[method]
    allowed = spec.needs <= ROLE_PERMISSIONS[role]
    # Cases that must leave the resources as they are share them; a call that may
    # change them gets its own.
    shared = spec.took_effect is None or not allowed
    base = f"{method}-{'shared' if shared else role}".replace("_", "-")
    world = World(callers[ROOT], callers[role], f"{role}-{method}".replace("_", "-"), base)
    if base not in prepared:
        spec.resources(world)
        prepared.add(base)
    spec.state(world)
    before = None if allowed else world.fingerprint()

    response = spec.call(world)

    if allowed:
        assert response.status_code == 200, f"{role} may {method}: {response.text}"
        if spec.took_effect is not None:
            assert spec.took_effect(world), f"{role}'s {method} answered 200 but did nothing"
    else:
        denied(response, 403)
        if spec.took_effect is not None:
            assert not spec.took_effect(world), f"{role}'s refused {method} took effect"
        assert world.fingerprint() == before


def _route_names(routes: list[Any]) -> Iterator[str]:
    for route in routes:
        inner = getattr(route, "original_router", None)  # an included router
        if inner is not None:
            yield from _route_names(inner.routes)
        elif getattr(route, "path", "").startswith("/v1/"):
            yield route.name


def test_every_route_is_in_the_table() -> None:
    """A new route must be added above (and so to Google's model) to be tested."""
    routes = set(_route_names(create_app().routes))
    # Two cases exercise the seek route.
    tested = {n for n in METHODS if not n.startswith("seek_")} | {"seek"}
    assert routes == tested


@pytest.mark.parametrize("role", ROLES)
def test_test_iam_permissions_reports_the_role(role: str, callers: dict[str, httpx.Client]) -> None:
    """Asked about every permission, the project answers exactly those of the role."""
    response = callers[role].post(f"{P}:testIamPermissions", json={"permissions": UNIVERSE})
    held = ok(response).get("permissions", [])
    assert held == [p for p in UNIVERSE if p in ROLE_PERMISSIONS[role]]


def test_refusals_do_not_reveal_existence(callers: dict[str, httpx.Client]) -> None:
    """Without permission, a missing resource and an existing one are refused alike (403,
    as Pub/Sub does); with it, the missing one is NOT_FOUND."""
    ok(callers[ROOT].put(f"{P}/topics/exists", json={}))
    nobody, viewer = callers["nobody"], callers["viewer"]
    for path in ("/topics/exists", "/topics/missing"):
        denied(nobody.get(P + path), 403)
        denied(nobody.post(f"{P}{path}:publish", json={"messages": [{"data": b64("x")}]}))
    asked = {"permissions": UNIVERSE}
    for response in (
        viewer.get(f"{P}/topics/missing"),
        viewer.post(f"{P}/topics/missing:testIamPermissions", json=asked),
        callers[ROOT].get(f"{P}/topics/missing:getIamPolicy"),
    ):
        assert response.status_code == 404, response.text
        assert response.json()["error"]["status"] == "NOT_FOUND"
    # Asking what one may do on a topic one cannot see answers "nothing", not 404.
    assert ok(nobody.post(f"{P}/topics/missing:testIamPermissions", json=asked)) == {}
