"""Subscription semantics through the REST API with real server and client processes."""

from __future__ import annotations

import base64
import json
import multiprocessing as mp
import os
import random
import signal
import threading
import time
from pathlib import Path

import httpx
import pytest
from support import LakeSpec, start_server, stop_server

from lakepubsub import Engine, SubscriptionName

P = "/v1/projects/demo"


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def create(http: httpx.Client, sub: str, topic: str = "work", **body: object) -> httpx.Response:
    http.put(f"{P}/topics/{topic}", json={})
    return http.put(
        f"{P}/subscriptions/{sub}", json={"topic": f"projects/demo/topics/{topic}", **body}
    )


def pull(http: httpx.Client, sub: str, n: int = 100, wait: bool = False) -> list[dict]:  # type: ignore[type-arg]
    body = {"maxMessages": n, "returnImmediately": not wait}
    response = http.post(f"{P}/subscriptions/{sub}:pull", json=body)
    assert response.status_code == 200, response.text
    return response.json().get("receivedMessages", [])  # type: ignore[no-any-return]


# -- exactly-once: 2 API processes, 4 consumer processes, crashes ---------------------


def _eod_consumer(urls: list[str], out: str, stop: str) -> None:
    rng = random.Random(os.getpid())
    clients = [httpx.Client(base_url=u, timeout=30) for u in urls]
    with open(out, "a") as log:
        while not os.path.exists(stop):
            http = rng.choice(clients)
            items = pull(http, "eod", n=rng.randint(1, 20), wait=True)
            for item in items:
                offset = int(item["message"]["messageId"])
                if rng.random() < 0.2:  # give up the lease: it must go to someone else
                    http.post(
                        f"{P}/subscriptions/eod:modifyAckDeadline",
                        json={"ackIds": [item["ackId"]], "ackDeadlineSeconds": rng.choice([0, 1])},
                    )
                    continue
                response = http.post(
                    f"{P}/subscriptions/eod:acknowledge", json={"ackIds": [item["ackId"]]}
                )
                if response.status_code == 200:
                    log.write(json.dumps({"offset": offset, "ok": True}) + "\n")
                else:
                    details = response.json()["error"].get("details", [])
                    assert details and item["ackId"] in details[0]["metadata"], response.text
                log.flush()


@pytest.mark.parametrize("lake", ["local"], indirect=True)
def test_exactly_once_with_two_servers_and_crashing_consumers(
    lake: LakeSpec, tmp_path: Path
) -> None:
    servers = [start_server(lake), start_server(lake)]
    try:
        with servers[0].client() as http:
            assert create(http, "eod-default", enableExactlyOnceDelivery=True).status_code == 200
            assert http.get(f"{P}/subscriptions/eod-default").json()["ackDeadlineSeconds"] == 60
            # 10 s so that leases of killed consumers come back within the test
            body = {"enableExactlyOnceDelivery": True, "ackDeadlineSeconds": 10}
            assert create(http, "eod", **body).status_code == 200
            total = 200
            for _i in range(0, total, 50):
                http.post(f"{P}/topics/work:publish", json={"messages": [{"data": b64(b"x")}] * 50})
        urls = [s.url for s in servers]
        stop = str(tmp_path / "stop")
        ctx = mp.get_context("spawn")
        logs = [str(tmp_path / f"c{i}") for i in range(4)]
        procs = [ctx.Process(target=_eod_consumer, args=(urls, log, stop)) for log in logs]
        for p in procs:
            p.start()
        deadline = time.monotonic() + 150
        rng = random.Random(3)
        kills = 0
        while time.monotonic() < deadline:
            acked = sum(
                len(Path(log).read_text().splitlines()) for log in logs if Path(log).exists()
            )
            if acked >= total:
                break
            time.sleep(rng.uniform(1.0, 2.5))
            if kills < 4:  # crash a consumer mid-flight; its leases expire (60 s) or are taken
                victim = rng.randrange(len(procs))
                os.kill(procs[victim].pid or 0, signal.SIGKILL)
                procs[victim].join()
                procs[victim] = ctx.Process(target=_eod_consumer, args=(urls, logs[victim], stop))
                procs[victim].start()
                kills += 1
        Path(stop).touch()
        for p in procs:
            p.join(timeout=60)
            if p.is_alive():
                p.kill()
        # Leases held by killed consumers expire after the 10 s deadline; drain them.
        with servers[1].client() as http:
            end = time.monotonic() + 60
            while time.monotonic() < end:
                for item in pull(http, "eod", n=100, wait=True):
                    ack = {"ackIds": [item["ackId"]]}
                    if http.post(f"{P}/subscriptions/eod:acknowledge", json=ack).status_code == 200:
                        with open(logs[0], "a") as log:
                            offset = int(item["message"]["messageId"])
                            log.write(json.dumps({"offset": offset, "ok": True}) + "\n")
                with Engine(lake.settings()) as engine:
                    state = engine.subscription_state(SubscriptionName("demo", "eod"))
                if state.floor() == total:
                    break
        logged = [
            json.loads(line)["offset"]
            for log in logs
            for line in Path(log).read_text().splitlines()
        ]
        assert len(logged) == len(set(logged)), "no message successfully acked twice"
        # A consumer killed between a committed ack and its log line leaves an ack
        # unlogged, so completeness is read from the subscription itself.
        assert state.floor() == total and state.rows == {}, "every message acked in the end"
    finally:
        for s in servers:
            stop_server(s)


# -- ordering ----------------------------------------------------------------------------


def test_ordering_keys_in_publish_order(server, http: httpx.Client) -> None:  # type: ignore[no-untyped-def]
    assert create(http, "ordered", enableMessageOrdering=True).status_code == 200
    keys = [f"user-{i}" for i in range(8)]

    def publisher(key: str) -> None:
        with server.client() as c:
            for n in range(10):
                c.post(
                    f"{P}/topics/work:publish",
                    json={"messages": [{"data": b64(f"{key}:{n}".encode()), "orderingKey": key}]},
                )

    threads = [threading.Thread(target=publisher, args=(k,)) for k in keys]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seen: dict[str, list[int]] = {k: [] for k in keys}
    lock = threading.Lock()

    def consumer() -> None:
        with server.client() as c:
            idle = 0
            while idle < 4:
                items = pull(c, "ordered", n=5)
                if not items:
                    idle += 1
                    continue
                idle = 0
                with lock:
                    for item in items:
                        key, n = base64.b64decode(item["message"]["data"]).decode().split(":")
                        assert item["message"]["orderingKey"] == key
                        seen[key].append(int(n))
                c.post(
                    f"{P}/subscriptions/ordered:acknowledge",
                    json={"ackIds": [i["ackId"] for i in items]},
                )

    consumers = [threading.Thread(target=consumer) for _ in range(3)]
    for t in consumers:
        t.start()
    for t in consumers:
        t.join()
    assert seen == {k: list(range(10)) for k in keys}


# -- dead letters ------------------------------------------------------------------------


def test_dead_letter_moves_everything_without_loss(http: httpx.Client) -> None:
    http.put(f"{P}/topics/dead", json={})
    http.put(f"{P}/subscriptions/dead-watch", json={"topic": "projects/demo/topics/dead"})
    response = create(
        http,
        "fragile",
        deadLetterPolicy={"deadLetterTopic": "projects/demo/topics/dead", "maxDeliveryAttempts": 5},
    )
    assert response.status_code == 200, response.text
    http.post(
        f"{P}/topics/work:publish",
        json={"messages": [{"data": b64(f"{i}".encode())} for i in range(20)]},
    )
    for _ in range(30):
        items = pull(http, "fragile", n=100)
        if not items:
            break
        assert all(1 <= i["deliveryAttempt"] <= 5 for i in items)
        http.post(f"{P}/subscriptions/fragile:nack", json={"ackIds": [i["ackId"] for i in items]})
    dead = []
    for _ in range(5):
        dead += pull(http, "dead-watch", n=100)
    payloads = sorted(int(base64.b64decode(d["message"]["data"])) for d in dead)
    assert payloads == list(range(20)), "every message reached the dead-letter topic once"
    attrs = dead[0]["message"]["attributes"]
    assert attrs["CloudPubSubDeadLetterSourceSubscription"] == "fragile"
    assert pull(http, "fragile", n=100) == []


# -- filters, seek, snapshots, detach ---------------------------------------------------------


def test_filters_over_rest(http: httpx.Client) -> None:
    bad = create(http, "bad-filter", filter="attributes.x = ")
    assert bad.status_code == 400 and "filter" in bad.json()["error"]["message"].lower()
    assert create(http, "reds", filter='attributes.color = "red"').status_code == 200
    immutable = http.patch(
        f"{P}/subscriptions/reds", json={"subscription": {"filter": ""}, "updateMask": "filter"}
    )
    assert immutable.status_code == 400
    http.post(
        f"{P}/topics/work:publish",
        json={
            "messages": [
                {"data": "eA==", "attributes": {"color": c}} for c in ("red", "blue", "red")
            ]
        },
    )
    assert [i["message"]["messageId"] for i in pull(http, "reds")] == ["0", "2"]


def test_seek_and_snapshots_over_rest(http: httpx.Client) -> None:
    assert create(http, "replay").status_code == 200
    http.post(f"{P}/topics/work:publish", json={"messages": [{"data": "eA=="}] * 3})
    items = pull(http, "replay")
    http.post(f"{P}/subscriptions/replay:acknowledge", json={"ackIds": [items[0]["ackId"]]})
    snap = http.put(
        f"{P}/snapshots/snap-a", json={"subscription": "projects/demo/subscriptions/replay"}
    )
    assert snap.status_code == 200 and snap.json()["topic"] == "projects/demo/topics/work"
    http.post(
        f"{P}/subscriptions/replay:acknowledge", json={"ackIds": [i["ackId"] for i in items[1:]]}
    )
    assert pull(http, "replay") == []
    assert (
        http.post(
            f"{P}/subscriptions/replay:seek", json={"snapshot": "projects/demo/snapshots/snap-a"}
        ).json()
        == {}
    )
    assert [i["message"]["messageId"] for i in pull(http, "replay")] == ["1", "2"]
    assert (
        http.get(f"{P}/snapshots").json()["snapshots"][0]["name"]
        == "projects/demo/snapshots/snap-a"
    )
    assert http.get(f"{P}/topics/work/snapshots").json() == {
        "snapshots": ["projects/demo/snapshots/snap-a"]
    }
    assert (
        http.post(f"{P}/subscriptions/replay:seek", json={"time": "2000-01-01T00:00:00Z"}).json()
        == {}
    )
    assert [i["message"]["messageId"] for i in pull(http, "replay")] == ["0", "1", "2"]
    both = http.post(f"{P}/subscriptions/replay:seek", json={})
    assert both.status_code == 400
    assert http.delete(f"{P}/snapshots/snap-a").json() == {}
    assert http.get(f"{P}/snapshots/snap-a").status_code == 404


def test_detach_over_rest(http: httpx.Client) -> None:
    assert create(http, "leaving").status_code == 200
    assert http.post(f"{P}/subscriptions/leaving:detach", json={}).json() == {}
    assert http.get(f"{P}/subscriptions/leaving").json()["detached"] is True
    response = http.post(f"{P}/subscriptions/leaving:pull", json={"maxMessages": 1})
    assert response.status_code == 400
    assert response.json()["error"]["status"] == "FAILED_PRECONDITION"
