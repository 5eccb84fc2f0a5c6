"""Open-loop load with Google's Python client, unmodified: one process publishes,
one subscribes.

    python -m bench.s3.load publish HOST --topics T1,T2 --rate R --seconds S [--single]
    python -m bench.s3.load subscribe HOST --subscriptions S1,S2 --expect N --seconds S

``publish`` offers ``R`` messages a second in all, spread evenly over the topics,
each sent at its scheduled time whatever the answers (an open loop), with the
client's default batching, or with ``--single`` one message per publish call
(batching off, as a service publishing one event per request does). It stamps
the schedule time in the ``sent-ns`` attribute (time.monotonic_ns(): one clock
for the processes of a Linux machine) and prints a JSON line: acks' latency
from schedule to answer (p50, p99), failures.

``subscribe`` holds a StreamingPull stream per subscription, acks each message,
and prints a JSON line when ``expect`` distinct messages arrived or it gives up:
publish -> callback latency (p50, p99), distinct messages, duplicates.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import threading
import time
from collections.abc import Sequence
from functools import partial

import orjson
from google.cloud import pubsub_v1

from bench.report import quantile

SENT = "sent-ns"
PAYLOAD = b"x" * 1024
NS_PER_MS = 1_000_000
# The subscriber gives up this long after the last new message.
STALL_S = 30.0
# The publish latency's median is also reported per this much of the schedule
# (the Go client's s3Window): whether a run fell behind from its start or later.
WINDOW_S = 5.0


def _quantiles(values: list[float]) -> dict[str, float]:
    p50 = statistics.median(values) if values else float("nan")
    return {"p50": p50, "p99": quantile(values, 0.99)}


def publish(host: str, topics: list[str], rate: float, seconds: float, single: bool) -> None:
    os.environ["PUBSUB_EMULATOR_HOST"] = host

    unbatched = [pubsub_v1.types.BatchSettings(max_messages=1)] if single else []
    publisher = pubsub_v1.PublisherClient(*unbatched)
    latencies: list[float] = []
    by_window: dict[int, list[float]] = {}
    failures: list[str] = []
    lock = threading.Lock()
    start = time.monotonic_ns()

    def done(scheduled: int):  # type: ignore[no-untyped-def]
        def record(future) -> None:  # type: ignore[no-untyped-def]
            answered = time.monotonic_ns()
            with lock:
                try:
                    future.result()
                    latency = (answered - scheduled) / NS_PER_MS
                    latencies.append(latency)
                    window = int((scheduled - start) / 1e9 // WINDOW_S)
                    by_window.setdefault(window, []).append(latency)
                except Exception as exc:  # counted and reported
                    failures.append(type(exc).__name__)

        return record

    total = int(rate * seconds)
    interval_ns = int(1e9 / rate)
    futures = []
    for i in range(total):
        scheduled = start + i * interval_ns
        delay = (scheduled - time.monotonic_ns()) / 1e9
        if delay > 0:
            time.sleep(delay)
        topic = topics[i % len(topics)]
        future = publisher.publish(topic, PAYLOAD, **{SENT: str(scheduled)})
        future.add_done_callback(done(scheduled))
        futures.append(future)
    for future in futures:
        with contextlib.suppress(Exception):  # recorded by the callback
            future.result(timeout=120)
    time.sleep(0.2)  # the last callbacks
    behind_s = (time.monotonic_ns() - start) / 1e9 - seconds
    with lock:
        summary = {
            "sent": total,
            "acked": len(latencies),
            "failures": len(failures),
            "failure_kinds": sorted(set(failures)),
            "ack_ms": _quantiles(latencies),
            "ack_p50_ms_by_window": [
                statistics.median(by_window.get(w, [-1.0]))
                for w in range(max(by_window, default=-1) + 1)
            ],
            "finished_behind_s": behind_s,
        }
    print(orjson.dumps(summary).decode(), flush=True)


def subscribe(host: str, subscriptions: list[str], expect: int, seconds: float) -> None:
    os.environ["PUBSUB_EMULATOR_HOST"] = host

    subscriber = pubsub_v1.SubscriberClient()
    # Message ids are unique within a topic: a message is (subscription, id).
    seen: set[tuple[str, str]] = set()
    duplicates = 0
    latencies: list[float] = []
    lock = threading.Lock()
    last_new = [time.monotonic()]

    def received(subscription: str, message) -> None:  # type: ignore[no-untyped-def]
        nonlocal duplicates
        now = time.monotonic_ns()
        message.ack()
        key = (subscription, message.message_id)
        with lock:
            if key in seen:
                duplicates += 1
                return
            seen.add(key)
            last_new[0] = time.monotonic()
            sent = message.attributes.get(SENT)
            if sent:
                latencies.append((now - int(sent)) / NS_PER_MS)

    futures = [subscriber.subscribe(s, partial(received, s)) for s in subscriptions]
    print("ready", flush=True)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with lock:
            if len(seen) >= expect:
                break
            if seen and time.monotonic() - last_new[0] > STALL_S:
                break
        time.sleep(0.05)
    time.sleep(1.0)  # duplicates that follow
    for future in futures:
        future.cancel()
    with lock:
        summary = {"distinct": len(seen), "duplicates": duplicates, "e2e_ms": _quantiles(latencies)}
    print(orjson.dumps(summary).decode(), flush=True)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="role", required=True)
    pub = sub.add_parser("publish")
    pub.add_argument("host")
    pub.add_argument("--topics", required=True)
    pub.add_argument("--rate", type=float, required=True)
    pub.add_argument("--seconds", type=float, required=True)
    pub.add_argument("--single", action="store_true")
    con = sub.add_parser("subscribe")
    con.add_argument("host")
    con.add_argument("--subscriptions", required=True)
    con.add_argument("--expect", type=int, required=True)
    con.add_argument("--seconds", type=float, required=True)
    args = parser.parse_args(argv)
    if args.role == "publish":
        publish(args.host, args.topics.split(","), args.rate, args.seconds, args.single)
    else:
        subscribe(args.host, args.subscriptions.split(","), args.expect, args.seconds)


if __name__ == "__main__":
    main()
