"""What a million 1 KiB messages cost on S3: published once, delivered once.

The phases and prices: bench/README.md, "Cost on S3". Writes ``cost.md``.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence

from bench import peer_lakepubsub as lps
from bench import report
from bench.harness.lakepubsub_server import BUCKET, S3_KINDS, BenchError, LakePubSubServer
from bench.harness.moto_server import MotoServer
from bench.s3 import prices
from lakepubsub import constants

DAYS_PER_MONTH = 30
PUBLISHERS = 8
MILLION = 1_000_000
# Cloud Pub/Sub's list price for the same traffic, as the issue states it.
PUBSUB_USD_PER_MILLION = 0.08
TARGET_USD_PER_MILLION = 0.008


def _lake_bytes(moto: MotoServer) -> int:
    pages = moto.client().get_paginator("list_objects_v2").paginate(Bucket=BUCKET)
    return sum(item["Size"] for page in pages for item in page.get("Contents", ()))


def run(messages: int, batch: int) -> list[str]:
    per_client = messages // PUBLISHERS
    total = per_client * PUBLISHERS
    phases: dict[str, Counter[str]] = {}
    with LakePubSubServer(s3=True) as server:
        assert server.moto is not None
        topic, subscription = server.topic_and_subscription(ack_deadline_s=60)
        offset = server.moto.log_offset()
        started = time.monotonic()
        lps.publish(
            server.url, server.pid, topic, batch_size=batch, per_client=[per_client] * PUBLISHERS
        )
        publish_s = time.monotonic() - started
        phases["publish"] = server.moto.requests_since(offset)
        offset = server.moto.log_offset()
        started = time.monotonic()
        reports, _ = lps.consume(server, subscription, total=total)
        if sum(r.messages for r in reports) != total:
            raise BenchError(f"received {sum(r.messages for r in reports)} of {total}")
        drain_s = time.monotonic() - started
        server.check_all_acked(topic, subscription, total)
        phases["deliver + ack"] = server.moto.requests_since(offset)
        stored = _lake_bytes(server.moto)
    scale = MILLION / total
    retention_days = constants.DEFAULT_TOPIC_HISTORY_S / 86400
    storage_usd = (
        stored * scale / 1e9 * prices.STORAGE_USD_PER_GB_MONTH * retention_days / DAYS_PER_MONTH
    )
    lines = report.header(
        "Cost on S3 per million 1 KiB messages, published and delivered once",
        command=f"python -m bench cost --messages {messages} --batch {batch}",
        about=f"one server, moto S3; {total:,} messages published by {PUBLISHERS} clients in "
        f"batches of {batch} ({publish_s:.1f} s), drained by one consumer ({drain_s:.1f} s); "
        f"{prices.describe()}; storage ${prices.STORAGE_USD_PER_GB_MONTH}/GB-month; scaled to "
        "1M messages",
    )
    rows = [
        [
            name,
            *(f"{requests[k] * scale:,.0f}" for k in S3_KINDS),
            f"${prices.usd(requests) * scale:.5f}",
        ]
        for name, requests in phases.items()
    ]
    request_usd = sum(prices.usd(requests) * scale for requests in phases.values())
    lines += report.table(["phase", *(k.upper() for k in S3_KINDS), "USD per 1M messages"], rows)
    total_usd = request_usd + storage_usd
    verdict = "within" if total_usd <= TARGET_USD_PER_MILLION else "above"
    lines += [
        "",
        f"- requests: **${request_usd:.5f}** per million messages",
        f"- storage: {stored * scale / 1e9:.2f} GB per million messages in the lake "
        f"(messages, lease and catalog tables, Delta logs), kept {retention_days:g} days "
        f"(the default topic history): **${storage_usd:.5f}**",
        f"- total: **${total_usd:.5f}** per million messages, {verdict} the "
        f"${TARGET_USD_PER_MILLION} goal (Cloud Pub/Sub lists about "
        f"${PUBSUB_USD_PER_MILLION} for the same traffic)",
    ]
    return lines


def main(argv: Sequence[str] | None = None) -> None:
    parser = report.parser(__doc__ or "", quick="10,000 messages (CI)")
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=100)
    args = parser.parse_args(argv)
    report.write(args.out, "cost.md", run(10_000 if args.quick else args.messages, args.batch))
