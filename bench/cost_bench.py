"""What a million 1 KiB messages cost on S3: published once, delivered once.

    python -m bench.cost_bench [--messages 100000] [--batch 100] [--quick]

One ``lakepubsub`` server on a moto S3 lake (``bench/peer_lakepubsub.py``):
8 clients publish ``messages`` in batches of ``batch`` over REST, then one
consumer drains them (pull of 1,000 + ack). moto's request log gives the S3
requests of each phase by kind; they are priced at the S3 Standard list prices
of ``bench/compare.py`` and scaled to a million messages. Storage is the bytes
the lake holds after the run, kept for the default topic retention (7 days) at
``STORAGE_USD_PER_GB_MONTH``. Background work of the server (checkpoints, log
cleanup) is inside the phases; the maintenance jobs (compaction, truncation)
are not run, so their requests are not counted. Written to
``bench/results/cost.md``.
"""

from __future__ import annotations

import argparse
import platform
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import boto3

from bench import peer_lakepubsub as lps
from bench.compare import (
    _GET_TIER,
    _PUT_TIER,
    S3_GET_TIER_PER_1000,
    S3_PRICES_AS_OF,
    S3_PUT_TIER_PER_1000,
)
from lakepubsub import constants

RESULTS = Path(__file__).resolve().parent / "results"
# S3 Standard storage, us-east-1, first 50 TB, USD per GB-month (aws.amazon.com/s3/pricing).
STORAGE_USD_PER_GB_MONTH = 0.023
DAYS_PER_MONTH = 30
PUBLISHERS = 8
MILLION = 1_000_000
# Cloud Pub/Sub's list price for the same traffic, as the issue states it.
PUBSUB_USD_PER_MILLION = 0.08
TARGET_USD_PER_MILLION = 0.008


def _usd(requests: Counter[str]) -> float:
    put = sum(requests[k] for k in _PUT_TIER) / 1000 * S3_PUT_TIER_PER_1000
    get = sum(requests[k] for k in _GET_TIER) / 1000 * S3_GET_TIER_PER_1000
    return put + get


def _lake_bytes(server: lps.LakePubSubServer) -> int:
    options = server.storage_options
    s3 = boto3.client(
        "s3",
        endpoint_url=options["AWS_ENDPOINT_URL"],
        aws_access_key_id=options["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=options["AWS_SECRET_ACCESS_KEY"],
        region_name=options["AWS_REGION"],
    )
    total = 0
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=lps.BUCKET):
        total += sum(item["Size"] for item in page.get("Contents", ()))
    return total


def run(messages: int, batch: int) -> list[str]:
    per_client = messages // PUBLISHERS
    total = per_client * PUBLISHERS
    phases: dict[str, Counter[str]] = {}
    with lps.LakePubSubServer(s3=True) as server:
        assert server.moto is not None
        topic = lps._create_topic(server)
        subscription = lps._create_subscription(server, topic, ack_deadline_s=60)
        offset = server.moto.log_offset()
        started = time.monotonic()
        lps._publish(server, topic, batch_size=batch, per_client=[per_client] * PUBLISHERS)
        publish_s = time.monotonic() - started
        phases["publish"] = server.moto.requests_since(offset)
        offset = server.moto.log_offset()
        started = time.monotonic()
        job = lps._ConsumeJob(
            url=server.url, subscription=subscription, max_messages_per_pull=1000, total=total
        )
        reports, _ = lps._run_clients([job], server_pid=server.pid)
        if sum(r.messages for r in reports) != total:
            raise lps.BenchError(f"received {sum(r.messages for r in reports)} of {total}")
        drain_s = time.monotonic() - started
        lps._check_all_acked(server, topic, subscription, total)
        phases["deliver + ack"] = server.moto.requests_since(offset)
        stored = _lake_bytes(server)
    scale = MILLION / total
    retention_days = constants.DEFAULT_TOPIC_HISTORY_S / 86400
    storage_usd = stored * scale / 1e9 * STORAGE_USD_PER_GB_MONTH * retention_days / DAYS_PER_MONTH
    lines = [
        "# Cost on S3 per million 1 KiB messages, published and delivered once",
        "",
        f"{time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC · {platform.machine()} · "
        f"`python -m bench.cost_bench --messages {messages} --batch {batch}` · one server, "
        f"moto S3; {total:,} messages published by {PUBLISHERS} clients in batches of "
        f"{batch} ({publish_s:.1f} s), drained by one consumer ({drain_s:.1f} s); "
        f"S3 Standard list prices as of {S3_PRICES_AS_OF} (requests: "
        f"${S3_PUT_TIER_PER_1000}/1,000 PUT/POST/LIST, ${S3_GET_TIER_PER_1000}/1,000 "
        f"GET/HEAD; storage ${STORAGE_USD_PER_GB_MONTH}/GB-month), scaled to 1M messages",
        "",
        "| phase | PUT | POST | LIST | GET | HEAD | DELETE | USD per 1M messages |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    request_usd = 0.0
    for name, requests in phases.items():
        usd = _usd(requests) * scale
        request_usd += usd
        cells = " | ".join(f"{requests[k] * scale:,.0f}" for k in lps.S3_KINDS)
        lines.append(f"| {name} | {cells} | ${usd:.5f} |")
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
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--quick", action="store_true", help="10,000 messages (CI)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="report directory")
    args = parser.parse_args(argv)
    lines = run(10_000 if args.quick else args.messages, args.batch)
    text = "\n".join(lines) + "\n"
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "cost.md").write_text(text)


if __name__ == "__main__":
    main()
