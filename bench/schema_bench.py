"""Schemas: what validation costs a publisher, and what a typed view costs a query.

The two parts: bench/README.md, "Schemas: validation on publish, typed views". Writes
``schema.md`` (``schema-quick.md`` with ``--quick``); ``--publish-only`` runs the first
part alone and only prints it.
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import os
import platform
import shutil
import statistics
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import fastavro
import httpx
import psutil
import pyarrow as pa
from pyspark.sql import functions as sf

from bench import report as report_
from bench.harness.lakepubsub_server import LakePubSubServer
from bench.spark_scan import interleaved
from lakepubsub import Engine, PublishMessage, Settings, Topic, TopicName
from lakepubsub.resources.names import SchemaName
from lakepubsub.resources.topics import SchemaSettings
from lakepubsub.spark import local_session
from lakepubsub.spark.views import register

BATCH = 100
CLIENTS = 4
# Alternating rounds per topic kind: CPU per message wanders with the machine's load,
# and a median of five rides out a busy round on either side.
ROUNDS = 5
_JSON = {"content-type": "application/json"}


def _record(name: str, fields: str) -> dict[str, Any]:
    """An Avro record from ``"name:type name:type …"``."""
    pairs = [f.split(":") for f in fields.split()]
    kinds: dict[str, Any] = {"strings": {"type": "array", "items": "string"}}
    return {"type": "record", "name": name, "fields": [
        {"name": n, "type": kinds.get(t, t)} for n, t in pairs
    ]}  # fmt: skip


# Ten fields, encoded to about 1 KiB.
WIDE = _record(
    "Order",
    "id:long customer:string region:string amount:double items:int paid:boolean"
    " street:string city:string note:string tags:strings",
)
NARROW_V1 = _record("Sale", "id:long region:string amount:double note:string")
COUNT = {"name": "count", "type": "int", "default": 1}
NARROW_V2 = {**NARROW_V1, "fields": [*NARROW_V1["fields"], COUNT]}
REGIONS = ("eu", "us", "apac", "latam")
QUERY = (
    "SELECT region, count(*) AS sales, sum(amount) AS amount, sum(count) AS items"
    " FROM {} GROUP BY region"
)


def encode(schema: dict[str, Any], record: dict[str, Any]) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), record)
    return out.getvalue()


def wide_record(i: int) -> bytes:
    return encode(
        WIDE,
        {
            "id": i, "customer": f"customer-{i:08d}" * 4, "region": REGIONS[i % 4],
            "amount": i * 0.25, "items": i % 7, "paid": i % 2 == 0, "street": "s" * 200,
            "city": "c" * 100, "note": "n" * 400, "tags": ["t" * 20] * 5,
        },
    )  # fmt: skip


def publish_cost(requests: int) -> dict[str, Any]:
    """Server CPU microseconds per message and messages per second, per topic kind, and
    the machine's load average before and after."""
    load_before = os.getloadavg()[0]

    record = wide_record(1)
    body = json.dumps({"messages": [{"data": base64.b64encode(record).decode()}] * BATCH}).encode()
    out: dict[str, list[tuple[float, float]]] = {"no schema": [], "avro (BINARY)": []}
    with LakePubSubServer() as server, httpx.Client(base_url=server.url, timeout=60) as http:
        p = "/v1/projects/bench"
        definition = {"type": "AVRO", "definition": json.dumps(WIDE)}
        http.post(f"{p}/schemas", params={"schemaId": "orders"}, json=definition).raise_for_status()
        http.put(f"{p}/topics/plain", json={}).raise_for_status()
        settings = {"schema": "projects/bench/schemas/orders", "encoding": "BINARY"}
        http.put(f"{p}/topics/typed", json={"schemaSettings": settings}).raise_for_status()
        process = psutil.Process(server.pid)
        topics = {"no schema": "plain", "avro (BINARY)": "typed"}
        for topic in topics.values():  # warm-up
            _drive(server.url, f"{p}/topics/{topic}:publish", body, max(requests // 10, CLIENTS))
        for _ in range(ROUNDS):
            for label, topic in topics.items():
                before = sum(process.cpu_times()[:2])
                start = time.perf_counter()
                _drive(server.url, f"{p}/topics/{topic}:publish", body, requests)
                wall = time.perf_counter() - start
                cpu = sum(process.cpu_times()[:2]) - before
                out[label].append((cpu / (requests * BATCH) * 1e6, requests * BATCH / wall))
    found: dict[str, Any] = {
        label: {
            "cpu_us_per_message": statistics.median(c for c, _ in runs),
            "messages_per_s": statistics.median(r for _, r in runs),
        }
        for label, runs in out.items()
    }
    found["load average"] = [load_before, os.getloadavg()[0]]
    return found


def _drive(url: str, path: str, body: bytes, requests: int) -> None:
    """``requests`` POSTs of ``body`` from ``CLIENTS`` threads, each with a client of its own."""

    def client(count: int) -> None:
        with httpx.Client(base_url=url, timeout=60) as http:
            for _ in range(count):
                http.post(path, content=body, headers=_JSON).raise_for_status()

    with ThreadPoolExecutor(CLIENTS) as pool:
        list(pool.map(client, [len(range(c, requests, CLIENTS)) for c in range(CLIENTS)]))


def build_lake(root: Path, records: int) -> None:
    with Engine(Settings(lake=str(root))) as engine:
        schema = SchemaName("bench", "sales")
        topic = TopicName("bench", "sales")
        engine.schemas.create(schema, "AVRO", json.dumps(NARROW_V1))
        engine.create_topic(
            Topic(topic, schema_settings=SchemaSettings(schema.path, encoding="BINARY"))
        )
        half = records // 2
        chunk = 1000
        for start in range(0, records, chunk):
            if start == half - half % chunk:
                engine.schemas.commit(schema, "AVRO", json.dumps(NARROW_V2))
            v2 = start >= half - half % chunk
            messages = []
            for i in range(start, min(start + chunk, records)):
                row = {"id": i, "region": REGIONS[i % 4], "amount": i * 0.5, "note": "x" * 150}
                if v2:
                    row["count"] = i % 5
                messages.append(PublishMessage(encode(NARROW_V2 if v2 else NARROW_V1, row)))
            engine.publish(topic, messages)


def typed_cost(records: int, runs: int) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="bench-schema-"))
    try:
        started = time.perf_counter()
        build_lake(root / "lake", records)
        build_s = time.perf_counter() - started
        spark = local_session("schema-bench", "local[2]", shuffle_partitions=2)
        register(spark, Settings(lake=str(root / "lake")))
        typed = spark.table("bench__sales__typed")
        assert typed.where("decode_error IS NOT NULL").count() == 0
        parquet_path = str(root / "decoded.parquet")
        typed.select("id", "region", "amount", "note", "count").write.parquet(parquet_path)
        spark.read.parquet(parquet_path).createOrReplaceTempView("sales_parquet")
        spark.table("bench__sales").select(
            "offset", sf.col("attributes")["googclient_schemarevisionid"].alias("revision"), "data"
        ).createOrReplaceTempView("sales_raw")
        with Engine(Settings(lake=str(root / "lake"))) as engine:
            found, _ = engine.schemas.list_revisions(SchemaName("bench", "sales"))
        definitions = {s.revision_id: s.definition for s in found}
        spark.udf.register("decode_udf", _udf_decoder(definitions, found[0].definition))
        spark.sql(
            "SELECT d.region AS region, d.amount AS amount, d.count AS count"
            " FROM (SELECT decode_udf(revision, data) AS d FROM sales_raw)"
        ).createOrReplaceTempView("sales_udf")
        jvm_pid = int(spark.sparkContext._jvm.ProcessHandle.current().pid())  # type: ignore[union-attr]
        actions = {
            name: (lambda v=view: spark.sql(QUERY.format(v)).collect())
            for name, view in (
                ("parquet of the decoded columns", "sales_parquet"),
                ("typed view (from_avro)", "bench__sales__typed"),
                ("Python Arrow UDF (fastavro)", "sales_udf"),
            )
        }
        results = {
            name: {"wall_s": t.median_s, "cpu_s": t.cpu_median_s}
            for name, t in interleaved(actions, runs, jvm_pid).items()
        }
        expected = spark.sql(QUERY.format("sales_parquet")).orderBy("region").collect()
        for view in ("bench__sales__typed", "sales_udf"):
            assert spark.sql(QUERY.format(view)).orderBy("region").collect() == expected
        spark.stop()
        return {"build_s": build_s, "queries": results}
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _udf_decoder(definitions: dict[str, str], target: str) -> Any:
    """The same decoding as a Python Arrow UDF: the row's revision as writer schema, the
    newest as reader (fastavro's schema resolution), into region/amount/count."""
    parsed: dict[str, Any] = {}

    def decode(revisions: pa.Array, data: pa.Array) -> pa.Array:
        if not parsed:
            parsed.update({r: fastavro.parse_schema(json.loads(d)) for r, d in definitions.items()})
            parsed[""] = fastavro.parse_schema(json.loads(target))
        rows = []
        for revision, blob in zip(revisions.to_pylist(), data.to_pylist(), strict=True):
            record = fastavro.schemaless_reader(io.BytesIO(blob), parsed[revision], parsed[""])
            found: Any = record
            rows.append((found["region"], found["amount"], found["count"]))
        regions, amounts, counts = zip(*rows, strict=True) if rows else ((), (), ())
        return pa.StructArray.from_arrays(
            [pa.array(regions, pa.string()), pa.array(amounts, pa.float64()),
             pa.array(counts, pa.int32())],
            ["region", "amount", "count"],
        )  # fmt: skip

    return sf.arrow_udf(decode, "struct<region string, amount double, count int>")  # type: ignore[attr-defined]


def report(publish: dict[str, Any], typed: dict[str, Any], args: argparse.Namespace) -> str:
    plain, avro = publish["no schema"], publish["avro (BINARY)"]
    ratio = avro["cpu_us_per_message"] / plain["cpu_us_per_message"]
    load_before, load_after = publish["load average"]
    lines = [
        "# Schemas: validation on publish, typed views",
        "",
        f"{time.strftime('%Y-%m-%d %H:%M')} · {platform.machine()} · {os.cpu_count()} cores · "
        f"load average {os.getloadavg()[0]:.1f} at the end · `python -m bench schema"
        f"{' --quick' if args.quick else ''}`",
        "",
        f"## Publish over REST: {args.requests} requests x {BATCH} messages of "
        f"{len(wide_record(1))} bytes, {CLIENTS} clients, median of {ROUNDS} rounds",
        "",
        f"Load average {load_before:.1f} before the rounds, {load_after:.1f} after.",
        "",
        "| topic | server CPU per message (µs) | messages/s |",
        "| --- | ---: | ---: |",
        *(
            f"| {label} | {v['cpu_us_per_message']:.1f} | {v['messages_per_s']:,.0f} |"
            for label, v in publish.items()
            if label != "load average"
        ),
        "",
        f"Avro validation costs **{ratio:.2f}x** the server CPU per message of no schema.",
        "",
        f"## Typed view: `{QUERY.format('…')}` over {args.records:,} records",
        "",
        f"Published in {typed['build_s']:.0f} s (1,000 per request, validated); the schema "
        "gained a revision half-way. Median of "
        f"{args.runs} runs after a warm-up; CPU of Spark's JVM and Python workers.",
        "",
        "| read path | wall (s) | CPU (s) | CPU vs parquet |",
        "| --- | ---: | ---: | ---: |",
    ]
    base = typed["queries"]["parquet of the decoded columns"]["cpu_s"]
    for name, t in typed["queries"].items():
        lines.append(
            f"| {name} | {t['wall_s']:.2f} | {t['cpu_s']:.2f} | {t['cpu_s'] / base:.1f}x |"
        )
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> None:
    parser = report_.parser(__doc__ or "")
    parser.add_argument("--publish-only", action="store_true")
    parser.add_argument("--requests", type=int, default=0)
    parser.add_argument("--records", type=int, default=0)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    args.requests = args.requests or (100 if args.quick else 1000)
    args.records = args.records or (20_000 if args.quick else 1_000_000)
    publish = publish_cost(args.requests)
    print(json.dumps(publish, indent=1), flush=True)
    if args.publish_only:
        plain, avro = publish["no schema"], publish["avro (BINARY)"]
        print(f"ratio {avro['cpu_us_per_message'] / plain['cpu_us_per_message']:.2f}")
        return
    typed = typed_cost(args.records, args.runs)
    print(json.dumps(typed, indent=1), flush=True)
    report_.write(
        args.out, "schema-quick.md" if args.quick else "schema.md", report(publish, typed, args)
    )
