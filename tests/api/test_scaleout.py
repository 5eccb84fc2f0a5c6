"""Several API processes on one lake serve one topic and one subscription (issue 17).

Real ``uvicorn`` server processes on one lake (local and moto S3); publishing
clients send each batch to the next server in turn, so consecutive batches of
one ordering key land on different processes; consumers pull from every
server. The servers route each topic's commits to one of them
(``lakepubsub/peering/``); these tests check what that must never change:
nothing lost or delivered twice, order per key, and nothing acknowledged lost
when a server is killed.
"""

from __future__ import annotations

import base64
import itertools
import re
import signal
import threading
import time
from collections import defaultdict

import httpx
import pytest
from support import LakeSpec, Server, start_server, stop_server

P = "/v1/projects/demo"
TOPIC = f"{P}/topics/hot"


def _metric(server: Server, name: str) -> float:
    text = httpx.get(f"{server.url}/metrics", timeout=10).text
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and not line.startswith("#"):
            total += float(line.rsplit(" ", 1)[1])
    return total


def _publisher(
    servers: list[Server], index: int, batches: int, acked: list[str], errors: list[str]
) -> None:
    """Key ``k{index}``: batch j goes to server (index + j) mod N, after batch j-1 answered."""
    clients = [s.client() for s in servers]
    for j in range(batches):
        http = clients[(index + j) % len(clients)]
        texts = [f"k{index}:{j}:{i}" for i in range(20)]
        body = {
            "messages": [
                {"data": base64.b64encode(t.encode()).decode(), "orderingKey": f"k{index}"}
                for t in texts
            ]
        }
        try:
            response = http.post(f"{TOPIC}:publish", json=body)
        except httpx.HTTPError as exc:  # the server was killed: not acknowledged
            errors.append(str(exc))
            continue
        if response.status_code != 200:
            errors.append(response.text)
            continue
        assert len(response.json()["messageIds"]) == len(texts)
        acked.extend(texts)


def _drain(servers: list[Server], sub: str, expected: int, deadline_s: float) -> list[list[str]]:
    """Pull (and ack) from every server in turn until ``expected`` distinct messages came
    (a redelivery, which at-least-once allows, does not count twice)."""
    clients = itertools.cycle([s.client() for s in servers])
    batches: list[list[str]] = []
    seen: set[str] = set()
    end = time.monotonic() + deadline_s
    while len(seen) < expected and time.monotonic() < end:
        http = next(clients)
        response = http.post(
            f"{P}/subscriptions/{sub}:pull", json={"maxMessages": 100, "returnImmediately": True}
        )
        assert response.status_code == 200, response.text
        items = response.json().get("receivedMessages", [])
        if not items:
            time.sleep(0.05)
            continue
        texts = [base64.b64decode(i["message"]["data"]).decode() for i in items]
        ack = http.post(
            f"{P}/subscriptions/{sub}:acknowledge", json={"ackIds": [i["ackId"] for i in items]}
        )
        assert ack.status_code == 200, ack.text
        batches.append(texts)
        seen.update(texts)
    return batches


def _in_key_order(delivered: list[str]) -> None:
    last: dict[str, tuple[int, int]] = {}
    for text in delivered:
        key, j, i = text.split(":")
        position = (int(j), int(i))
        assert position > last.get(key, (-1, -1)), f"{text} after {last[key]}"
        last[key] = position


@pytest.mark.parametrize("count", [3])
def test_servers_share_one_topic_and_subscription(lake: LakeSpec, count: int) -> None:
    servers = [start_server(lake) for _ in range(count)]
    try:
        with servers[0].client() as http:
            assert http.put(TOPIC, json={}).status_code == 200
            for sub, extra in (
                ("ordered", {"enableMessageOrdering": True}),
                ("once", {"enableExactlyOnceDelivery": True}),
            ):
                response = http.put(
                    f"{P}/subscriptions/{sub}",
                    json={"topic": "projects/demo/topics/hot", "ackDeadlineSeconds": 60, **extra},
                )
                assert response.status_code == 200, response.text
        time.sleep(1.2)  # the catalog cache of every server sees the subscriptions
        acked: list[str] = []
        errors: list[str] = []
        batches = 6 if lake.uri.startswith("s3://") else 15
        threads = [
            threading.Thread(target=_publisher, args=(servers, i, batches, acked, errors))
            for i in range(2 * count)
        ]
        for t in threads:
            t.start()
        # Consumers pull from every server while the publishers run.
        ordered = _drain(servers, "ordered", len(threads) * batches * 20, 120)
        for t in threads:
            t.join()
        assert not errors
        once = _drain(servers, "once", len(acked), 120)

        for delivered in (ordered, once):
            flat = [t for batch in delivered for t in batch]
            assert sorted(flat) == sorted(acked)  # every message once, none lost
        _in_key_order([t for batch in ordered for t in batch])

        # The servers agreed on one committer: the others handed it their work.
        forwarded = [_metric(s, "lakepubsub_peer_calls_total") for s in servers]
        assert sum(1 for f in forwarded if f == 0) == 1, forwarded
    finally:
        for server in servers:
            stop_server(server)


def test_owner_killed_loses_nothing_acknowledged(local_lake: LakeSpec) -> None:
    servers = [start_server(local_lake) for _ in range(3)]
    try:
        with servers[0].client() as http:
            assert http.put(TOPIC, json={}).status_code == 200
            response = http.put(
                f"{P}/subscriptions/all", json={"topic": "projects/demo/topics/hot"}
            )
            assert response.status_code == 200
        time.sleep(1.2)
        acked: list[str] = []
        errors: list[str] = []
        threads = [
            threading.Thread(target=_publisher, args=(servers, i, 60, acked, errors))
            for i in range(6)
        ]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(acked) < 600:
            time.sleep(0.05)
        forwarded = [_metric(s, "lakepubsub_peer_calls_total") for s in servers]
        owner = servers[forwarded.index(0)]
        owner.process.send_signal(signal.SIGKILL)
        owner.process.wait()
        for t in threads:
            t.join()
        survivors = [s for s in servers if s is not owner]
        assert len(acked) > 600  # the survivors kept publishing after the owner died
        delivered = [text for b in _drain(survivors, "all", len(acked), 120) for text in b]
        missing = set(acked) - set(delivered)
        assert not missing, sorted(missing)[:5]
        assert all(re.fullmatch(r"k\d:\d+:\d+", text) for text in delivered)
        per_key = defaultdict(set)
        for text in delivered:
            per_key[text.split(":")[0]].add(text)
        assert len(per_key) == 6
    finally:
        for server in servers:
            if server.process.poll() is None:
                stop_server(server)
