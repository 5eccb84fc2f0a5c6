"""Ordered delivery: drain a backlog published on a few ordering keys, checking order.

bench/README.md, "Ordered delivery". Writes ``ordering.md`` (full size only).
"""

from __future__ import annotations

import base64
import time
from collections.abc import Sequence

import httpx

from bench import report
from bench.harness.lakepubsub_server import LakePubSubServer
from bench.harness.meter import ProcessMeter

PUBLISH_BATCH = 500
PULL_MAX = 1_000
TIMEOUT_S = 600.0


def publish(url: str, topic: str, messages: int, keys: int) -> None:
    with httpx.Client(base_url=url, timeout=60) as http:
        for start in range(0, messages, PUBLISH_BATCH):
            batch = [
                {
                    "data": base64.b64encode(str(i).encode()).decode(),
                    "orderingKey": f"key-{i % keys}",
                }
                for i in range(start, min(messages, start + PUBLISH_BATCH))
            ]
            http.post(f"/v1/{topic}:publish", json={"messages": batch}).raise_for_status()


def drain(url: str, subscription: str, messages: int) -> dict[str, list[int]]:
    """Pull and ack until ``messages`` arrived; each key's message numbers in arrival order."""
    seen: dict[str, list[int]] = {}
    got = 0
    deadline = time.monotonic() + TIMEOUT_S
    with httpx.Client(base_url=url, timeout=60) as http:
        while got < messages:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{got} of {messages} messages in {TIMEOUT_S:g} s")
            answer = http.post(f"/v1/{subscription}:pull", json={"maxMessages": PULL_MAX})
            answer.raise_for_status()
            received = answer.json().get("receivedMessages", [])
            for r in received:
                m = r["message"]
                seen.setdefault(m["orderingKey"], []).append(int(base64.b64decode(m["data"])))
            got += len(received)
            if received:
                ack_ids = [r["ackId"] for r in received]
                http.post(
                    f"/v1/{subscription}:acknowledge", json={"ackIds": ack_ids}
                ).raise_for_status()
    return seen


def check(seen: dict[str, list[int]], messages: int, keys: int) -> None:
    for k in range(keys):
        expected = list(range(k, messages, keys))
        if seen.get(f"key-{k}") != expected:
            raise AssertionError(f"key-{k}: not every message once, in publish order")


def main(argv: Sequence[str] | None = None) -> None:
    parser = report.parser(__doc__ or "", quick="1,000 messages")
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--keys", type=int, default=4)
    args = parser.parse_args(argv)
    messages = 1_000 if args.quick else args.messages
    with LakePubSubServer() as server:
        topic, subscription = server.topic_and_subscription(
            ack_deadline_s=60, enableMessageOrdering=True
        )
        publish(server.url, topic, messages, args.keys)
        started = time.monotonic()
        with ProcessMeter(server.pid) as meter:
            seen = drain(server.url, subscription, messages)
        elapsed = time.monotonic() - started
    check(seen, messages, args.keys)
    rate = messages / elapsed
    cpu_us = meter.usage.cpu_s / messages * 1e6
    line = (
        f"ordered drain: {messages:,} messages on {args.keys} keys, REST pull "
        f"(maxMessages {PULL_MAX:,}) + ack: {elapsed:.1f} s, {rate:,.0f} msgs/s, "
        f"server CPU {cpu_us:.0f} µs/message; every key in publish order"
    )
    print(line)
    if not args.quick:
        command = f"python -m bench ordering --messages {messages} --keys {args.keys}"
        report.write(
            args.out,
            "ordering.md",
            ["# Ordered delivery", "", f"`{command}`", "", f"- {line}"],
            echo=False,
        )
