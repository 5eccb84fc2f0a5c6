"""Minimal, deterministic reproductions of the bugs the chaos runs found.

    python -m tests.chaos.repro [--json PATH]

Each repro states what a correct service does and reports what it observed;
the exit status is 1 while any of them fails. The storage repros script the
fault proxy: the listed faults hit the next Delta commit PUTs of one table
kind, in order ("" lets one through), everything else passes untouched.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass

import httpx

from tests.chaos.proxy import ProxyProcess
from tests.chaos.servers import ApiServer, moto_server, s3_lake

PROJECT = "repro"


@dataclass
class Repro:
    name: str
    ok: bool
    expected: str
    observed: str


Step = Callable[[httpx.Client, ProxyProcess], Repro]


def _scripted(proxy: ProxyProcess, match: str, script: list[str]) -> None:
    proxy.configure(enabled=True, commit_match=match, script=script)


def _calm(proxy: ProxyProcess) -> None:
    proxy.configure(enabled=False, script=[])


def catalog_answer_lost_topic(client: httpx.Client, proxy: ProxyProcess) -> Repro:
    """B1: the catalog commit of a topic create lands but its answer is lost."""
    _scripted(proxy, "/catalog/_delta_log/", ["error_after"])
    created = client.put("/topics/b1-topic", json={})
    _calm(proxy)
    found = client.get("/topics/b1-topic")
    published = client.post("/topics/b1-topic:publish", json={"messages": [{"data": "eA=="}]})
    ok = found.status_code != 200 or published.status_code == 200
    return Repro(
        "catalog-answer-lost-topic",
        ok,
        "a topic that GET finds accepts publishes",
        f"PUT topic -> {created.status_code}; GET -> {found.status_code}; "
        f"publish -> {published.status_code} {published.text[:160]}",
    )


def catalog_answer_lost_subscription(client: httpx.Client, proxy: ProxyProcess) -> Repro:
    """B1: the same for a subscription create."""
    client.put("/topics/b1-base", json={})
    body = {"topic": f"projects/{PROJECT}/topics/b1-base"}
    _scripted(proxy, "/catalog/_delta_log/", ["error_after"])
    created = client.put("/subscriptions/b1-sub", json=body)
    _calm(proxy)
    found = client.get("/subscriptions/b1-sub")
    pulled = client.post(
        "/subscriptions/b1-sub:pull", json={"maxMessages": 1, "returnImmediately": True}
    )
    ok = found.status_code != 200 or pulled.status_code == 200
    return Repro(
        "catalog-answer-lost-subscription",
        ok,
        "a subscription that GET finds answers pulls",
        f"PUT subscription -> {created.status_code}; GET -> {found.status_code}; "
        f"pull -> {pulled.status_code} {pulled.text[:160]}",
    )


def table_create_answer_lost(client: httpx.Client, proxy: ProxyProcess) -> Repro:
    """B2: a new table's first commit lands, its answer is lost, and so is a later one's."""
    script = ["error_after", "", "error_after"]
    _scripted(proxy, "/messages/_delta_log/", script)
    topic = client.put("/topics/b2-topic", json={})
    _scripted(proxy, "/leases/_delta_log/", script)
    client.put("/topics/b2-base", json={})
    body = {"topic": f"projects/{PROJECT}/topics/b2-base"}
    sub = client.put("/subscriptions/b2-sub", json=body)
    _calm(proxy)
    ok = topic.status_code < 500 and sub.status_code < 500
    return Repro(
        "table-create-answer-lost",
        ok,
        "no 500: the create answers 200, or 503 (UNAVAILABLE) and may be retried",
        f"PUT topic -> {topic.status_code} {topic.text[:120]}; "
        f"PUT subscription -> {sub.status_code} {sub.text[:120]}",
    )


def publish_non_ascii_data(client: httpx.Client, proxy: ProxyProcess) -> Repro:
    """B3: a publish whose ``data`` is not ASCII (hence not base64)."""
    client.put("/topics/b3-topic", json={})
    response = client.post("/topics/b3-topic:publish", json={"messages": [{"data": "é"}]})
    return Repro(
        "publish-non-ascii-data",
        response.status_code == 400,
        "400 INVALID_ARGUMENT (invalid base64)",
        f"publish -> {response.status_code} {response.text[:160]}",
    )


REPROS: list[Step] = [
    catalog_answer_lost_topic,
    catalog_answer_lost_subscription,
    table_create_answer_lost,
    publish_non_ascii_data,
]


def run_all() -> list[Repro]:
    found = []
    with moto_server() as endpoint, ProxyProcess(endpoint, seed=0) as proxy:
        server = ApiServer(s3_lake(endpoint).via(proxy.url))
        server.start()
        try:
            base = f"{server.url}/v1/projects/{PROJECT}"
            with httpx.Client(base_url=base, timeout=120) as client:
                for step in REPROS:
                    found.append(step(client, proxy))
        finally:
            server.stop()
    return found


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.chaos.repro", description=__doc__)
    parser.add_argument("--json", help="also write the outcomes to this file")
    args = parser.parse_args()
    found = run_all()
    for repro in found:
        print(f"{'ok  ' if repro.ok else 'FAIL'} {repro.name}: expected {repro.expected}")
        print(f"     observed: {repro.observed}")
    if args.json:
        with open(args.json, "w") as out:
            json.dump([asdict(r) for r in found], out, indent=1)
    return 0 if all(r.ok for r in found) else 1


if __name__ == "__main__":
    sys.exit(main())
