"""The REST surface end to end against a real server process."""

from __future__ import annotations

import base64
import threading
import time

import httpx
import pytest

P = "/v1/projects/demo"


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def error(response: httpx.Response) -> dict:  # type: ignore[type-arg]
    body = response.json()
    assert set(body) == {"error"}, body
    assert {"code", "message", "status"} <= set(body["error"])
    assert body["error"]["code"] == response.status_code
    return body["error"]  # type: ignore[no-any-return]


def pull_now(http: httpx.Client) -> dict:  # type: ignore[type-arg]
    body = {"maxMessages": 5, "returnImmediately": True}
    return http.post(f"{P}/subscriptions/orders-sub:pull", json=body).json()  # type: ignore[no-any-return]


def make(
    http: httpx.Client, topic: str = "orders", sub: str = "orders-sub", **sub_body: object
) -> None:
    assert http.put(f"{P}/topics/{topic}", json={}).status_code == 200
    body = {"topic": f"projects/demo/topics/{topic}", **sub_body}
    response = http.put(f"{P}/subscriptions/{sub}", json=body)
    assert response.status_code == 200, response.text


def test_topic_admin(http: httpx.Client) -> None:
    created = http.put(f"{P}/topics/orders", json={"labels": {"team": "a"}})
    assert created.json() == {"name": "projects/demo/topics/orders", "labels": {"team": "a"}}
    dup = http.put(f"{P}/topics/orders", json={})
    assert dup.status_code == 409 and error(dup)["status"] == "ALREADY_EXISTS"
    assert http.get(f"{P}/topics/orders").json()["labels"] == {"team": "a"}
    patched = http.patch(
        f"{P}/topics/orders", json={"topic": {"labels": {"team": "b"}}, "updateMask": "labels"}
    )
    assert patched.json()["labels"] == {"team": "b"}
    for i in range(3):
        http.put(f"{P}/topics/more-{i}", json={})
    page = http.get(f"{P}/topics", params={"pageSize": 2}).json()
    assert len(page["topics"]) == 2 and page["nextPageToken"]
    rest = http.get(f"{P}/topics", params={"pageSize": 2, "pageToken": page["nextPageToken"]})
    assert len(rest.json()["topics"]) == 2 and "nextPageToken" not in rest.json()
    assert http.delete(f"{P}/topics/orders").json() == {}
    missing = http.get(f"{P}/topics/orders")
    assert missing.status_code == 404 and error(missing)["status"] == "NOT_FOUND"


def test_publish_pull_ack_roundtrip(http: httpx.Client) -> None:
    make(http)
    published = http.post(
        f"{P}/topics/orders:publish",
        params={"alt": "json", "$alt": "json;enum-encoding=int"},
        json={
            "messages": [
                {"data": b64(b"one"), "attributes": {"k": "v"}},
                {"data": b64(b"two"), "orderingKey": "key-1"},
            ]
        },
    )
    assert published.status_code == 200, published.text
    ids = published.json()["messageIds"]
    assert len(ids) == 2
    pulled = http.post(f"{P}/subscriptions/orders-sub:pull", json={"maxMessages": 10})
    items = pulled.json()["receivedMessages"]
    assert [base64.b64decode(i["message"]["data"]) for i in items] == [b"one", b"two"]
    assert [i["message"]["messageId"] for i in items] == ids
    assert items[0]["message"]["attributes"] == {"k": "v"}
    assert items[1]["message"]["orderingKey"] == "key-1"
    assert items[0]["message"]["publishTime"].endswith("Z")
    assert "deliveryAttempt" not in items[0]  # set only with a dead-letter policy
    ack = http.post(
        f"{P}/subscriptions/orders-sub:acknowledge", json={"ackIds": [i["ackId"] for i in items]}
    )
    assert ack.json() == {}
    empty = http.post(
        f"{P}/subscriptions/orders-sub:pull", json={"maxMessages": 10, "returnImmediately": True}
    )
    assert empty.json() == {}


def test_modify_deadline_and_nack(http: httpx.Client) -> None:
    make(http)
    http.post(f"{P}/topics/orders:publish", json={"messages": [{"data": b64(b"x")}]})
    (item,) = http.post(f"{P}/subscriptions/orders-sub:pull", json={"maxMessages": 1}).json()[
        "receivedMessages"
    ]
    nack = http.post(f"{P}/subscriptions/orders-sub:nack", json={"ackIds": [item["ackId"]]})
    assert nack.json() == {}
    (again,) = http.post(f"{P}/subscriptions/orders-sub:pull", json={"maxMessages": 1}).json()[
        "receivedMessages"
    ]
    assert again["message"]["messageId"] == item["message"]["messageId"]
    assert "deliveryAttempt" not in again  # set only with a dead-letter policy
    zero = http.post(
        f"{P}/subscriptions/orders-sub:modifyAckDeadline",
        json={"ackIds": [again["ackId"]], "ackDeadlineSeconds": 0},
    )
    assert zero.json() == {}
    bad = http.post(
        f"{P}/subscriptions/orders-sub:modifyAckDeadline",
        json={"ackIds": [again["ackId"]], "ackDeadlineSeconds": 601},
    )
    assert bad.status_code == 400 and error(bad)["status"] == "INVALID_ARGUMENT"


def test_truncate_event_in_pull(http: httpx.Client) -> None:
    make(http)
    http.post(f"{P}/topics/orders:publish", json={"messages": [{"data": b64(b"old")}] * 3})
    event = http.post(f"{P}/subscriptions/orders-sub:truncate", json={}).json()["event"]
    assert event["truncated"] is True and event["endOffset"] == 3
    http.post(f"{P}/topics/orders:publish", json={"messages": [{"data": b64(b"new")}]})
    items = http.post(f"{P}/subscriptions/orders-sub:pull", json={"maxMessages": 10}).json()[
        "receivedMessages"
    ]
    assert items[0]["event"]["truncated"] is True
    assert items[0]["message"]["attributes"]["lakepubsub.event"] == "truncated"
    assert [base64.b64decode(i["message"].get("data", "")) for i in items[1:]] == [b"new"]


def test_long_poll_waits_for_a_publish(http: httpx.Client, server) -> None:  # type: ignore[no-untyped-def]
    make(http)
    box: list[httpx.Response] = []

    def pull() -> None:
        with server.client() as other:
            box.append(other.post(f"{P}/subscriptions/orders-sub:pull", json={"maxMessages": 5}))

    thread = threading.Thread(target=pull)
    started = time.monotonic()
    thread.start()
    time.sleep(0.5)
    http.post(f"{P}/topics/orders:publish", json={"messages": [{"data": b64(b"late")}]})
    thread.join(timeout=15)
    assert box[0].json()["receivedMessages"][0]["message"]["data"] == b64(b"late")
    assert time.monotonic() - started < 2.0


def test_subscription_admin(http: httpx.Client) -> None:
    make(http, truncationPolicy={"maxBytes": 1000}, ackDeadlineSeconds=30, labels={"a": "b"})
    got = http.get(f"{P}/subscriptions/orders-sub").json()
    assert got["ackDeadlineSeconds"] == 30
    assert got["truncationPolicy"] == {"maxBytes": 1000}
    patched = http.patch(
        f"{P}/subscriptions/orders-sub",
        json={"subscription": {"ackDeadlineSeconds": 99}, "updateMask": "ackDeadlineSeconds"},
    )
    assert patched.json()["ackDeadlineSeconds"] == 99
    listed = http.get(f"{P}/subscriptions").json()["subscriptions"]
    assert [s["name"] for s in listed] == ["projects/demo/subscriptions/orders-sub"]
    by_topic = http.get(f"{P}/topics/orders/subscriptions").json()
    assert by_topic == {"subscriptions": ["projects/demo/subscriptions/orders-sub"]}
    push = http.post(
        f"{P}/subscriptions/orders-sub:modifyPushConfig",
        json={"pushConfig": {"pushEndpoint": "https://example.com/push"}},
    )
    assert push.json() == {}
    assert http.get(f"{P}/subscriptions/orders-sub").json()["pushConfig"] == {
        "pushEndpoint": "https://example.com/push"
    }
    assert http.delete(f"{P}/subscriptions/orders-sub").json() == {}
    assert http.get(f"{P}/subscriptions/orders-sub").status_code == 404


@pytest.mark.parametrize(
    ("method", "path", "body", "status"),
    [
        ("PUT", "/topics/ab", {}, 400),
        ("PUT", "/topics/goog-x", {}, 400),
        ("POST", "/topics/orders:publish", {"messages": [{"data": "!!notbase64"}]}, 400),
        ("POST", "/topics/orders:publish", {"messages": []}, 400),
        ("POST", "/topics/orders:publish", {"messages": [{}]}, 400),
        (
            "POST",
            "/topics/orders:publish",
            {"messages": [{"data": "eA==", "attributes": {"k": 1}}]},
            400,
        ),
        ("POST", "/topics/orders:publish", {"nope": 1}, 400),
        ("POST", "/topics/missing:publish", {"messages": [{"data": "eA=="}]}, 404),
        ("POST", "/subscriptions/orders-sub:acknowledge", {"ackIds": ["garbage"]}, 400),
        ("POST", "/subscriptions/orders-sub:acknowledge", {"ackIds": []}, 400),
        ("POST", "/subscriptions/orders-sub:pull", {"maxMessages": 0}, 400),
        ("POST", "/subscriptions/orders-sub:pull", {"maxMessages": "many"}, 400),
        ("PUT", "/subscriptions/x-sub", {"topic": "projects/demo/topics/missing"}, 404),
        ("PUT", "/subscriptions/x-sub", {"topic": "not-a-name"}, 400),
        (
            "PUT",
            "/subscriptions/x-sub",
            {"topic": "projects/demo/topics/orders", "ackDeadlineSeconds": 5},
            400,
        ),
        ("PUT", "/subscriptions/orders-sub", {"topic": "projects/demo/topics/orders"}, 409),
        ("PATCH", "/subscriptions/orders-sub", {"subscription": {}, "updateMask": "bogus"}, 400),
        ("GET", "/subscriptions/nope-sub", None, 404),
        ("POST", "/subscriptions/orders-sub:unknownVerb", {}, 405),
    ],
)
def test_bad_input_gets_a_clear_error_and_changes_nothing(
    http: httpx.Client, method: str, path: str, body: object, status: int
) -> None:
    make(http)
    before = http.get(f"{P}/topics").json(), http.get(f"{P}/subscriptions").json()
    response = http.request(method, P + path, json=body)
    assert response.status_code == status, response.text
    error(response)
    after = http.get(f"{P}/topics").json(), http.get(f"{P}/subscriptions").json()
    assert before == after
    pulled = http.post(
        f"{P}/subscriptions/orders-sub:pull", json={"maxMessages": 5, "returnImmediately": True}
    )
    assert pulled.json() == {}, "nothing was published by a refused request"


def test_malformed_json_and_oversized_bodies(http: httpx.Client) -> None:
    make(http)
    broken = http.post(f"{P}/topics/orders:publish", content=b"{not json")
    assert broken.status_code == 400 and error(broken)["status"] == "INVALID_ARGUMENT"
    broken_pull = http.post(f"{P}/subscriptions/orders-sub:pull", content=b"[")
    assert broken_pull.status_code == 400
    huge = http.post(
        f"{P}/topics/orders:publish",
        json={"messages": [{"data": b64(b"x" * 6_000_000)}, {"data": b64(b"y" * 6_000_000)}]},
    )
    assert huge.status_code == 400 and "limit" in error(huge)["message"]
    too_big = http.post(f"{P}/topics/orders:publish", content=b"x" * (21 * 1024 * 1024))
    assert too_big.status_code == 413
    big_attr = http.post(
        f"{P}/topics/orders:publish",
        json={"messages": [{"data": "eA==", "attributes": {"k": "v" * 1025}}]},
    )
    assert big_attr.status_code == 400
    assert (
        http.post(
            f"{P}/subscriptions/orders-sub:pull", json={"maxMessages": 5, "returnImmediately": True}
        ).json()
        == {}
    )


def test_operational_endpoints(http: httpx.Client) -> None:
    assert http.get("/healthz").json() == {"status": "ok"}
    assert http.get("/readyz").json() == {"status": "ready"}
    make(http)
    http.post(f"{P}/topics/orders:publish", json={"messages": [{"data": "eA=="}]})
    text = http.get("/metrics").text
    assert "lakepubsub_published_messages_total 1.0" in text
    assert 'lakepubsub_http_requests_total{code="200",method="POST",route="publish"}' in text
    doc = http.get("/openapi.json").json()
    assert "/v1/projects/{project}/topics/{topic}:publish" in doc["paths"]
    assert "PublishRequest" in doc["components"]["schemas"]
    received = doc["components"]["schemas"]["ReceivedMessageBody"]["properties"]
    assert "event" in received
