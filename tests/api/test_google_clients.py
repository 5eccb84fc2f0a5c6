"""Unmodified Google clients against the server: google-cloud-pubsub (REST transport)
and google-api-python-client (discovery document shipped in the package)."""

from __future__ import annotations

import pytest
from google.api_core import exceptions as gexc
from google.api_core.client_options import ClientOptions
from google.auth.credentials import AnonymousCredentials
from google.cloud import pubsub_v1

PROJECT = "compat"


@pytest.fixture
def publisher(server):  # type: ignore[no-untyped-def]
    return pubsub_v1.PublisherClient(
        credentials=AnonymousCredentials(),
        transport="rest",
        client_options=ClientOptions(api_endpoint=server.url),
    )


@pytest.fixture
def subscriber(server):  # type: ignore[no-untyped-def]
    # Not closed: SubscriberClient.close() assumes a gRPC channel (a client-library bug
    # with transport="rest").
    return pubsub_v1.SubscriberClient(
        credentials=AnonymousCredentials(),
        transport="rest",
        client_options=ClientOptions(api_endpoint=server.url),
    )


@pytest.mark.parametrize("lake", ["local"], indirect=True)
def test_google_cloud_pubsub_rest(publisher, subscriber) -> None:  # type: ignore[no-untyped-def]
    topic = publisher.topic_path(PROJECT, "compat-topic")
    sub = subscriber.subscription_path(PROJECT, "compat-sub")
    publisher.create_topic(name=topic)
    with pytest.raises(gexc.Conflict):  # HTTP 409, as for real Pub/Sub over REST
        publisher.create_topic(name=topic)
    assert publisher.get_topic(topic=topic).name == topic
    assert topic in [t.name for t in publisher.list_topics(project=f"projects/{PROJECT}")]
    with pytest.raises(gexc.NotFound):
        publisher.get_topic(topic=publisher.topic_path(PROJECT, "missing"))

    subscriber.create_subscription(name=sub, topic=topic, ack_deadline_seconds=30)
    with pytest.raises(gexc.Conflict):  # HTTP 409, as for real Pub/Sub over REST
        subscriber.create_subscription(name=sub, topic=topic)
    assert subscriber.get_subscription(subscription=sub).ack_deadline_seconds == 30

    futures = [publisher.publish(topic, f"m{i}".encode(), origin="test") for i in range(5)]
    ids = [f.result(timeout=30) for f in futures]
    assert len(set(ids)) == 5

    response = subscriber.pull(subscription=sub, max_messages=10, timeout=30)
    received = list(response.received_messages)
    assert sorted(r.message.data for r in received) == [f"m{i}".encode() for i in range(5)]
    assert all(r.message.attributes["origin"] == "test" for r in received)
    subscriber.modify_ack_deadline(
        subscription=sub, ack_ids=[received[0].ack_id], ack_deadline_seconds=0
    )
    subscriber.acknowledge(subscription=sub, ack_ids=[r.ack_id for r in received[1:]])
    again = subscriber.pull(subscription=sub, max_messages=10, timeout=30).received_messages
    assert [r.message.data for r in again] == [received[0].message.data]
    subscriber.acknowledge(subscription=sub, ack_ids=[again[0].ack_id])

    subscriber.delete_subscription(subscription=sub)
    with pytest.raises(gexc.NotFound):
        subscriber.get_subscription(subscription=sub)
    publisher.delete_topic(topic=topic)


@pytest.mark.parametrize("lake", ["local"], indirect=True)
def test_google_api_python_client(server) -> None:  # type: ignore[no-untyped-def]
    import base64

    from googleapiclient import discovery
    from googleapiclient.errors import HttpError

    service = discovery.build(
        "pubsub",
        "v1",
        credentials=AnonymousCredentials(),
        client_options={"api_endpoint": server.url},
        static_discovery=True,
    )
    topic = f"projects/{PROJECT}/topics/discovery-topic"
    sub = f"projects/{PROJECT}/subscriptions/discovery-sub"
    service.projects().topics().create(name=topic, body={}).execute()
    with pytest.raises(HttpError) as dup:
        service.projects().topics().create(name=topic, body={}).execute()
    assert dup.value.resp.status == 409
    service.projects().subscriptions().create(name=sub, body={"topic": topic}).execute()
    published = (
        service.projects()
        .topics()
        .publish(
            topic=topic,
            body={
                "messages": [{"data": base64.b64encode(b"hi").decode(), "attributes": {"a": "b"}}]
            },
        )
        .execute()
    )
    assert len(published["messageIds"]) == 1
    pulled = (
        service.projects()
        .subscriptions()
        .pull(subscription=sub, body={"maxMessages": 5, "returnImmediately": True})
        .execute()
    )
    (item,) = pulled["receivedMessages"]
    assert base64.b64decode(item["message"]["data"]) == b"hi"
    service.projects().subscriptions().modifyAckDeadline(
        subscription=sub, body={"ackIds": [item["ackId"]], "ackDeadlineSeconds": 60}
    ).execute()
    service.projects().subscriptions().acknowledge(
        subscription=sub, body={"ackIds": [item["ackId"]]}
    ).execute()
    listed = service.projects().topics().subscriptions().list(topic=topic).execute()
    assert listed["subscriptions"] == [sub]
    with pytest.raises(HttpError) as missing:
        service.projects().subscriptions().get(subscription=f"{sub}-nope").execute()
    assert missing.value.resp.status == 404
