"""Google's unmodified Python client over gRPC (``PUBSUB_EMULATOR_HOST`` only): resources."""

from __future__ import annotations

import pytest
from google.api_core import exceptions
from google.cloud import pubsub_v1
from google.iam.v1 import policy_pb2
from google.protobuf import duration_pb2, field_mask_pb2
from grpckit import Names, Serve, rest


def test_topic_lifecycle(publisher: pubsub_v1.PublisherClient, names: Names) -> None:
    topic = publisher.create_topic(
        request={
            "name": names.topic(),
            "labels": {"team": "data"},
            "message_retention_duration": duration_pb2.Duration(seconds=3600),
        }
    )
    assert topic.name == names.topic()
    assert topic.labels["team"] == "data"
    assert topic.message_retention_duration.total_seconds() == 3600
    with pytest.raises(exceptions.AlreadyExists):
        publisher.create_topic(name=names.topic())
    assert publisher.get_topic(topic=names.topic()).labels["team"] == "data"
    updated = publisher.update_topic(
        topic={"name": names.topic(), "labels": {"team": "ops"}},
        update_mask=field_mask_pb2.FieldMask(paths=["labels"]),
    )
    assert updated.labels["team"] == "ops"
    listed = [t.name for t in publisher.list_topics(project="projects/demo")]
    assert names.topic() in listed
    publisher.delete_topic(topic=names.topic())
    with pytest.raises(exceptions.NotFound):
        publisher.get_topic(topic=names.topic())


def test_subscription_lifecycle(
    publisher: pubsub_v1.PublisherClient, subscriber: pubsub_v1.SubscriberClient, names: Names
) -> None:
    publisher.create_topic(name=names.topic())
    sub = subscriber.create_subscription(
        request={
            "name": names.subscription(),
            "topic": names.topic(),
            "ack_deadline_seconds": 30,
            "filter": 'attributes.kind = "a"',
            "labels": {"x": "y"},
        }
    )
    assert sub.topic == names.topic()
    assert sub.ack_deadline_seconds == 30
    assert sub.filter == 'attributes.kind = "a"'
    with pytest.raises(exceptions.AlreadyExists):
        subscriber.create_subscription(name=names.subscription(), topic=names.topic())
    with pytest.raises(exceptions.NotFound):
        subscriber.create_subscription(
            name=names.subscription("other"), topic=names.topic("missing")
        )
    got = subscriber.get_subscription(subscription=names.subscription())
    assert got.labels["x"] == "y"
    updated = subscriber.update_subscription(
        subscription={"name": names.subscription(), "ack_deadline_seconds": 45},
        update_mask=field_mask_pb2.FieldMask(paths=["ack_deadline_seconds"]),
    )
    assert updated.ack_deadline_seconds == 45
    assert names.subscription() in [
        s.name for s in subscriber.list_subscriptions(project="projects/demo")
    ]
    assert list(publisher.list_topic_subscriptions(topic=names.topic())) == [names.subscription()]
    with pytest.raises(exceptions.InvalidArgument):
        subscriber.update_subscription(
            subscription={"name": names.subscription(), "ack_deadline_seconds": 5},
            update_mask=field_mask_pb2.FieldMask(paths=["ack_deadline_seconds"]),
        )
    subscriber.delete_subscription(subscription=names.subscription())
    with pytest.raises(exceptions.NotFound):
        subscriber.get_subscription(subscription=names.subscription())


def test_snapshots_and_detach(
    publisher: pubsub_v1.PublisherClient, subscriber: pubsub_v1.SubscriberClient, names: Names
) -> None:
    publisher.create_topic(name=names.topic())
    subscriber.create_subscription(name=names.subscription(), topic=names.topic())
    snap = subscriber.create_snapshot(
        request={
            "name": names.snapshot(),
            "subscription": names.subscription(),
            "labels": {"k": "v"},
        }
    )
    assert snap.topic == names.topic()
    assert snap.expire_time.timestamp() > 0
    assert subscriber.get_snapshot(snapshot=names.snapshot()).labels["k"] == "v"
    assert [s.name for s in subscriber.list_snapshots(project="projects/demo")] == [
        names.snapshot()
    ]
    assert list(publisher.list_topic_snapshots(topic=names.topic())) == [names.snapshot()]
    updated = subscriber.update_snapshot(
        snapshot={"name": names.snapshot(), "labels": {"k": "w"}},
        update_mask=field_mask_pb2.FieldMask(paths=["labels"]),
    )
    assert updated.labels["k"] == "w"
    subscriber.delete_snapshot(snapshot=names.snapshot())
    with pytest.raises(exceptions.NotFound):
        subscriber.get_snapshot(snapshot=names.snapshot())
    publisher.detach_subscription(request={"subscription": names.subscription()})
    assert subscriber.get_subscription(subscription=names.subscription()).detached
    with pytest.raises(exceptions.FailedPrecondition):
        subscriber.pull(subscription=names.subscription(), max_messages=1, timeout=10)


def test_iam_policy(publisher: pubsub_v1.PublisherClient, names: Names, emulator: Serve) -> None:
    publisher.create_topic(name=names.topic())
    empty = publisher.get_iam_policy(request={"resource": names.topic()})
    assert list(empty.bindings) == []
    policy = policy_pb2.Policy(
        bindings=[policy_pb2.Binding(role="roles/pubsub.publisher", members=["user:a@b.example"])],
        etag=empty.etag,
    )
    stored = publisher.set_iam_policy(request={"resource": names.topic(), "policy": policy})
    assert [b.role for b in stored.bindings] == ["roles/pubsub.publisher"]
    # The same policy through the other door.
    with rest(emulator) as http:
        project, _, topic = names.topic().split("/")[1:]
        doc = http.get(f"/v1/projects/{project}/topics/{topic}:getIamPolicy").json()
    assert doc["bindings"][0]["members"] == ["user:a@b.example"]
    stale = policy_pb2.Policy(bindings=[], etag=empty.etag)
    with pytest.raises(exceptions.Aborted):
        publisher.set_iam_policy(request={"resource": names.topic(), "policy": stale})
    granted = publisher.test_iam_permissions(
        request={"resource": names.topic(), "permissions": ["pubsub.topics.publish"]}
    )
    assert list(granted.permissions) == ["pubsub.topics.publish"]


def test_bad_names_and_arguments(
    publisher: pubsub_v1.PublisherClient, subscriber: pubsub_v1.SubscriberClient, names: Names
) -> None:
    with pytest.raises(exceptions.InvalidArgument, match="topic name"):
        publisher.create_topic(name="projects/demo/topics/x")
    with pytest.raises(exceptions.InvalidArgument):
        publisher.get_topic(topic="not-a-name")
    publisher.create_topic(name=names.topic())
    subscriber.create_subscription(name=names.subscription(), topic=names.topic())
    with pytest.raises(exceptions.InvalidArgument):
        subscriber.pull(subscription=names.subscription(), max_messages=0, timeout=10)
    with pytest.raises(exceptions.InvalidArgument, match="ack"):
        subscriber.acknowledge(subscription=names.subscription(), ack_ids=["bogus"])
    with pytest.raises(exceptions.NotFound):
        subscriber.pull(subscription=names.subscription("nope"), max_messages=1, timeout=10)
