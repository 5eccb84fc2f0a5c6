"""Where a grant applies: a project's grant stops at the project, a resource's policy
(set with ``:setIamPolicy``) grants on that resource only, and policies are written
with etags. One real server; every test works on its own resources."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from authkit import ROOT, b64, clients, denied, key_config, ok, policy, serving

from api.auth import POLICY_MAX_STALENESS_S

A = "/v1/projects/proj-a"
B = "/v1/projects/proj-b"
KEYS = {
    ROOT: {"roles": {"*": ["roles/pubsub.admin"]}},
    "alice": {"roles": {"proj-a": ["roles/pubsub.editor"]}},
    "carol": {"roles": {"projects/proj-b": ["editor"]}},  # both spellings are accepted
    "bob": {},
    "dave": {"principal": "serviceAccount:dave@proj-a.iam.gserviceaccount.com"},
}
PUBLISH = {"messages": [{"data": b64("hello")}]}


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, httpx.Client]]:
    env = {"LAKEPUBSUB_API_KEYS": key_config(KEYS)}
    with (
        serving(tmp_path_factory.mktemp("policy-lake"), env) as server,
        clients(server, *KEYS) as made,
    ):
        yield made


def make(root: httpx.Client, project: str, *, topics: tuple[str, ...] = (), **subs: str) -> None:
    """Topics, then subscriptions ``name=topic`` (in the same project), with the root key."""
    for topic in topics:
        ok(root.put(f"{project}/topics/{topic}", json={}))
    for sub, topic in subs.items():
        body = {"topic": f"{project[4:]}/topics/{topic}"}
        ok(root.put(f"{project}/subscriptions/{sub.replace('_', '-')}", json=body))


def grant(root: httpx.Client, resource: str, role: str, *members: str) -> dict[str, Any]:
    response = root.post(f"{resource}:setIamPolicy", json=policy((role, list(members))))
    return ok(response)  # type: ignore[no-any-return]


def names(response: httpx.Response, kind: str) -> set[str]:
    return {item["name"] for item in ok(response).get(kind, [])}


# -- projects -------------------------------------------------------------------------------


def test_project_grant_stops_at_the_project(keys: dict[str, httpx.Client]) -> None:
    root, alice, carol = keys[ROOT], keys["alice"], keys["carol"]
    make(root, B, topics=("b-orders",), b_orders_sub="b-orders")
    ok(alice.put(f"{A}/topics/a-orders", json={}))
    ok(carol.put(f"{B}/topics/b-made", json={}))
    before = names(root.get(f"{B}/topics"), "topics"), names(root.get(f"{A}/topics"), "topics")

    for response in (
        alice.get(f"{B}/topics"),
        alice.put(f"{B}/topics/by-alice", json={}),
        alice.get(f"{B}/topics/b-orders"),
        alice.post(f"{B}/topics/b-orders:publish", json=PUBLISH),
        alice.delete(f"{B}/topics/b-orders"),
        alice.post(f"{B}/subscriptions/b-orders-sub:pull", json={"maxMessages": 1}),
        alice.get(f"{B}:getIamPolicy"),
        carol.get(f"{A}/topics/a-orders"),
        carol.delete(f"{A}/topics/a-orders"),
    ):
        denied(response)

    after = names(root.get(f"{B}/topics"), "topics"), names(root.get(f"{A}/topics"), "topics")
    assert after == before
    pulled = root.post(
        f"{B}/subscriptions/b-orders-sub:pull", json={"maxMessages": 1, "returnImmediately": True}
    )
    assert ok(pulled) == {}, "the refused publish left nothing"


def test_subscribing_across_projects_needs_the_topics_grant(
    keys: dict[str, httpx.Client],
) -> None:
    """Pub/Sub's model: subscriptions.create where the subscription goes, and
    topics.attachSubscription on the topic, which may be in another project."""
    root, alice, carol = keys[ROOT], keys["alice"], keys["carol"]
    ok(alice.put(f"{A}/topics/shared-feed", json={}))
    body = {"topic": "projects/proj-a/topics/shared-feed"}
    denied(carol.put(f"{B}/subscriptions/feed-copy", json=body))
    assert root.get(f"{B}/subscriptions/feed-copy").status_code == 404

    grant(root, f"{A}/topics/shared-feed", "roles/pubsub.subscriber", "apiKey:carol")
    ok(carol.put(f"{B}/subscriptions/feed-copy", json=body))
    ok(alice.post(f"{A}/topics/shared-feed:publish", json=PUBLISH))
    got = ok(carol.post(f"{B}/subscriptions/feed-copy:pull", json={"maxMessages": 1}))
    assert got["receivedMessages"][0]["message"]["data"] == b64("hello")
    # The topic grant is for subscribing; the topic itself stays out of reach.
    denied(carol.get(f"{A}/topics/shared-feed"))
    denied(carol.post(f"{A}/topics/shared-feed:publish", json=PUBLISH))


def test_project_policy_grants_within_its_project(keys: dict[str, httpx.Client]) -> None:
    root, dave = keys[ROOT], keys["dave"]
    make(root, B, topics=("dave-b",))
    denied(dave.get(f"{A}/topics"))
    current = ok(root.get(f"{A}:getIamPolicy"))
    body = policy(
        ("roles/pubsub.viewer", ["serviceAccount:dave@proj-a.iam.gserviceaccount.com"]),
        etag=current["etag"],
    )
    ok(root.post(f"{A}:setIamPolicy", json=body))
    ok(dave.get(f"{A}/topics"))
    denied(dave.get(f"{B}/topics"))
    denied(dave.get(f"{B}/topics/dave-b"))
    denied(dave.put(f"{A}/topics/by-dave", json={}))
    denied(dave.get(f"{A}:getIamPolicy"))
    denied(dave.post(f"{A}:setIamPolicy", json=policy()))


# -- resources ------------------------------------------------------------------------------


def test_topic_policy_grants_on_that_topic_only(keys: dict[str, httpx.Client]) -> None:
    root, bob = keys[ROOT], keys["bob"]
    make(root, A, topics=("bob-t1", "bob-t2"), bob_t1_sub="bob-t1")
    grant(root, f"{A}/topics/bob-t1", "roles/pubsub.publisher", "apiKey:bob")

    ok(bob.post(f"{A}/topics/bob-t1:publish", json=PUBLISH))
    denied(bob.post(f"{A}/topics/bob-t2:publish", json=PUBLISH))
    denied(bob.get(f"{A}/topics/bob-t1"))  # publishing is not viewing
    denied(bob.get(f"{A}/topics"))
    denied(bob.post(f"{B}/topics/bob-t1:publish", json=PUBLISH))  # same name, other project
    # A topic's policy does not reach its subscriptions.
    denied(bob.post(f"{A}/subscriptions/bob-t1-sub:pull", json={"maxMessages": 1}))
    got = ok(root.post(f"{A}/subscriptions/bob-t1-sub:pull", json={"maxMessages": 5}))
    assert [m["message"]["data"] for m in got["receivedMessages"]] == [b64("hello")]


def test_subscription_policy_grants_on_that_subscription_only(
    keys: dict[str, httpx.Client],
) -> None:
    root, bob = keys[ROOT], keys["bob"]
    make(root, A, topics=("bob-feed",), bob_s1="bob-feed", bob_s2="bob-feed")
    grant(root, f"{A}/subscriptions/bob-s1", "roles/pubsub.subscriber", "apiKey:bob")
    ok(root.post(f"{A}/topics/bob-feed:publish", json=PUBLISH))

    got = ok(bob.post(f"{A}/subscriptions/bob-s1:pull", json={"maxMessages": 1}))
    (item,) = got["receivedMessages"]
    ok(bob.post(f"{A}/subscriptions/bob-s1:acknowledge", json={"ackIds": [item["ackId"]]}))
    denied(bob.post(f"{A}/subscriptions/bob-s2:pull", json={"maxMessages": 1}))
    denied(bob.get(f"{A}/subscriptions/bob-s1"))
    denied(bob.delete(f"{A}/subscriptions/bob-s1"))
    # A subscription's policy does not reach its topic.
    denied(bob.put(f"{A}/subscriptions/bob-s3", json={"topic": "projects/proj-a/topics/bob-feed"}))
    denied(bob.post(f"{A}/topics/bob-feed:publish", json=PUBLISH))


def test_snapshot_policy_grants_on_that_snapshot_only(keys: dict[str, httpx.Client]) -> None:
    root, bob = keys[ROOT], keys["bob"]
    make(root, A, topics=("bob-snapped",), bob_snapped_sub="bob-snapped")
    for snap in ("bob-n1", "bob-n2"):
        body = {"subscription": "projects/proj-a/subscriptions/bob-snapped-sub"}
        ok(root.put(f"{A}/snapshots/{snap}", json=body))
    grant(root, f"{A}/snapshots/bob-n1", "roles/pubsub.viewer", "apiKey:bob")

    assert ok(bob.get(f"{A}/snapshots/bob-n1"))["name"] == "projects/proj-a/snapshots/bob-n1"
    denied(bob.get(f"{A}/snapshots/bob-n2"))
    denied(bob.get(f"{A}/snapshots"))
    denied(bob.get(f"{A}/subscriptions/bob-snapped-sub"))


def test_detach_needs_the_grant_on_the_topic(keys: dict[str, httpx.Client]) -> None:
    """Pub/Sub checks topics.detachSubscription on the subscription's topic."""
    root, bob = keys[ROOT], keys["bob"]
    make(root, A, topics=("bob-detach", "bob-other"), bob_d1="bob-detach", bob_d2="bob-other")
    grant(root, f"{A}/topics/bob-detach", "roles/pubsub.editor", "apiKey:bob")
    denied(bob.post(f"{A}/subscriptions/bob-d2:detach", json={}))
    ok(bob.post(f"{A}/subscriptions/bob-d1:detach", json={}))
    assert ok(root.get(f"{A}/subscriptions/bob-d1"))["detached"] is True
    assert ok(root.get(f"{A}/subscriptions/bob-d2"))["detached"] is False


def test_seek_and_snapshot_need_grants_on_both_resources(keys: dict[str, httpx.Client]) -> None:
    root, bob = keys[ROOT], keys["bob"]
    make(root, A, topics=("bob-replay",), bob_r1="bob-replay")
    ok(
        root.put(
            f"{A}/snapshots/bob-r-snap",
            json={"subscription": "projects/proj-a/subscriptions/bob-r1"},
        )
    )
    grant(root, f"{A}/subscriptions/bob-r1", "roles/pubsub.subscriber", "apiKey:bob")
    seek = {"snapshot": "projects/proj-a/snapshots/bob-r-snap"}
    denied(bob.post(f"{A}/subscriptions/bob-r1:seek", json=seek))  # snapshots.seek missing
    grant(root, f"{A}/snapshots/bob-r-snap", "roles/pubsub.subscriber", "apiKey:bob")
    ok(bob.post(f"{A}/subscriptions/bob-r1:seek", json=seek))
    # Creating a snapshot needs snapshots.create on the project, not only consume.
    create = {"subscription": "projects/proj-a/subscriptions/bob-r1"}
    denied(bob.put(f"{A}/snapshots/bob-r-snap2", json=create))
    assert root.get(f"{A}/snapshots/bob-r-snap2").status_code == 404


@pytest.mark.parametrize(
    ("route", "body"),
    [
        (
            "PUT /subscriptions/dlq-create",
            {
                "topic": "projects/proj-a/topics/alice-work",
                "deadLetterPolicy": {"deadLetterTopic": "projects/proj-b/topics/b-dead"},
            },
        ),
        (
            "PUT /subscriptions/dlq-create-snake",
            {
                "topic": "projects/proj-a/topics/alice-work",
                "dead_letter_policy": {"dead_letter_topic": "projects/proj-b/topics/b-dead"},
            },
        ),
        (
            "PATCH /subscriptions/alice-work-sub",
            {
                "subscription": {
                    "deadLetterPolicy": {"deadLetterTopic": "projects/proj-b/topics/b-dead"}
                },
                "updateMask": "deadLetterPolicy",
            },
        ),
    ],
    ids=["create", "create-snake-case", "update"],
)
def test_dead_letter_topic_needs_publish_on_it(
    keys: dict[str, httpx.Client], route: str, body: dict[str, Any]
) -> None:
    """Dead-lettering publishes into the dead-letter topic: naming one is publishing
    to it (Pub/Sub asks its service agent to hold the publisher role there)."""
    root, alice = keys[ROOT], keys["alice"]
    if root.get(f"{B}/topics/b-dead").status_code == 404:
        make(root, B, topics=("b-dead",))
        ok(alice.put(f"{A}/topics/alice-work", json={}))
        body_sub = {"topic": "projects/proj-a/topics/alice-work"}
        ok(alice.put(f"{A}/subscriptions/alice-work-sub", json=body_sub))
    method, path = route.split(" ")
    denied(alice.request(method, A + path, json=body))
    sub = ok(root.get(f"{A}/subscriptions/alice-work-sub"))
    assert "deadLetterPolicy" not in sub
    if method == "PUT":
        assert root.get(A + path).status_code == 404

    grant(root, f"{B}/topics/b-dead", "roles/pubsub.publisher", "apiKey:alice")
    try:
        ok(alice.request(method, A + path, json=body))
    finally:
        ok(root.post(f"{B}/topics/b-dead:setIamPolicy", json=policy()))
        if method == "PUT":
            root.delete(A + path)


# -- policies: etags, validation, testIamPermissions ----------------------------------------


def test_set_iam_policy_with_a_stale_etag_is_aborted(keys: dict[str, httpx.Client]) -> None:
    root = keys[ROOT]
    make(root, A, topics=("etag-topic",))
    path = f"{A}/topics/etag-topic"
    fresh = ok(root.get(f"{path}:getIamPolicy"))
    assert fresh == {"version": 1, "etag": "ACAB"}

    first = policy(("roles/pubsub.viewer", ["user:one@example.com"]), etag=fresh["etag"])
    written = ok(root.post(f"{path}:setIamPolicy", json=first))
    assert written["etag"] != fresh["etag"]
    assert written["bindings"] == [
        {"role": "roles/pubsub.viewer", "members": ["user:one@example.com"]}
    ]

    # A second read-modify-write that started from the same read loses.
    second = policy(("roles/pubsub.admin", ["user:two@example.com"]), etag=fresh["etag"])
    response = root.post(f"{path}:setIamPolicy", json=second)
    assert response.status_code == 409, response.text
    assert response.json()["error"]["status"] == "ABORTED"
    assert ok(root.get(f"{path}:getIamPolicy")) == written

    # With the current etag, or none, the write goes through; every write gets a new etag.
    again = ok(
        root.post(
            f"{path}:setIamPolicy",
            json={**second, "policy": {**second["policy"], "etag": written["etag"]}},
        )
    )
    assert again["etag"] not in (fresh["etag"], written["etag"])
    blind = ok(root.post(f"{path}:setIamPolicy", json=policy()))
    assert blind == {"version": 1, "etag": blind["etag"]}
    assert blind["etag"] != again["etag"]


def test_policy_of_a_missing_resource_is_not_found(keys: dict[str, httpx.Client]) -> None:
    root = keys[ROOT]
    for path in ("/topics/never", "/subscriptions/never", "/snapshots/never"):
        for response in (
            root.get(f"{A}{path}:getIamPolicy"),
            root.post(f"{A}{path}:setIamPolicy", json=policy()),
            root.post(f"{A}{path}:testIamPermissions", json={"permissions": []}),
        ):
            assert response.status_code == 404, response.text
            assert response.json()["error"]["status"] == "NOT_FOUND"


@pytest.mark.parametrize(
    "bindings",
    [
        [{"role": "roles/pubsub.superuser", "members": ["user:x@example.com"]}],
        [{"role": "roles/pubsub.viewer", "members": ["x@example.com"]}],
        [{"role": "roles/pubsub.viewer", "members": ["robot:x"]}],
        [
            {
                "role": "roles/pubsub.viewer",
                "members": ["user:x@example.com"],
                "condition": {"expression": "true"},
            }
        ],
        [
            {
                "role": "roles/pubsub.viewer",
                "members": [f"user:u{i}@example.com" for i in range(1_501)],
            }
        ],
    ],
    ids=["unknown-role", "member-without-type", "unknown-member-type", "condition", "too-many"],
)
def test_invalid_policy_is_refused_and_changes_nothing(
    keys: dict[str, httpx.Client], bindings: list[dict[str, Any]]
) -> None:
    root = keys[ROOT]
    if root.get(f"{A}/topics/strict-topic").status_code == 404:
        make(root, A, topics=("strict-topic",))
        grant(root, f"{A}/topics/strict-topic", "roles/pubsub.viewer", "user:kept@example.com")
    path = f"{A}/topics/strict-topic"
    before = ok(root.get(f"{path}:getIamPolicy"))
    response = root.post(f"{path}:setIamPolicy", json={"policy": {"bindings": bindings}})
    assert response.status_code == 400, response.text
    assert response.json()["error"]["status"] == "INVALID_ARGUMENT"
    assert ok(root.get(f"{path}:getIamPolicy")) == before


def test_test_iam_permissions_returns_the_subset_held(keys: dict[str, httpx.Client]) -> None:
    root, bob, alice = keys[ROOT], keys["bob"], keys["alice"]
    make(root, A, topics=("ask-t1", "ask-t2"))
    grant(root, f"{A}/topics/ask-t1", "roles/pubsub.publisher", "apiKey:bob")
    asked = [
        "pubsub.topics.get",
        "pubsub.topics.publish",
        "pubsub.topics.attachSubscription",
        "pubsub.topics.setIamPolicy",
        "pubsub.subscriptions.consume",  # not a topic's permission: never held on one
    ]

    def test(client: httpx.Client, path: str) -> Any:
        response = client.post(f"{path}:testIamPermissions", json={"permissions": asked})
        return ok(response).get("permissions", [])

    assert test(bob, f"{A}/topics/ask-t1") == ["pubsub.topics.publish"]
    assert test(bob, f"{A}/topics/ask-t2") == []
    assert test(bob, f"{A}/topics/ask-missing") == []  # bob may not know whether it exists
    assert test(bob, A) == []
    assert test(alice, f"{A}/topics/ask-t1") == asked[:3]
    assert test(alice, A) == [*asked[:3], "pubsub.subscriptions.consume"]
    assert test(alice, B) == []
    assert test(root, f"{A}/topics/ask-t2") == asked[:4]


def test_policy_ends_with_the_resource(keys: dict[str, httpx.Client]) -> None:
    """A topic deleted and created again under its name starts with an empty policy."""
    root, bob = keys[ROOT], keys["bob"]
    make(root, A, topics=("reborn",))
    grant(root, f"{A}/topics/reborn", "roles/pubsub.publisher", "apiKey:bob")
    ok(bob.post(f"{A}/topics/reborn:publish", json=PUBLISH))
    ok(root.delete(f"{A}/topics/reborn"))
    make(root, A, topics=("reborn",))
    assert ok(root.get(f"{A}/topics/reborn:getIamPolicy")) == {"version": 1, "etag": "ACAB"}
    # Checks read policies at most this stale (api/auth/settings.py).
    time.sleep(POLICY_MAX_STALENESS_S + 0.2)
    denied(bob.post(f"{A}/topics/reborn:publish", json=PUBLISH))
