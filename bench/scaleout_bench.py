"""One topic and one subscription served by several API processes on one lake.

    python -m bench.scaleout_bench [--servers 1,2] [--seconds 10] [--clients 8] [--s3] [--quick]

For each server count N: a fresh lake (a temp directory, or with ``--s3`` a
moto S3 server), N ``uvicorn api.app`` processes on it, one topic and one
subscription. Then two timed phases:

- ``publish``: ``--clients`` client processes, client i talking to server
  i mod N, each sends REST publishes of ``--batch`` 1 KiB messages back to
  back for ``--seconds``. Reported: messages/s over all clients, each
  server's share of the messages, the smallest share, Delta commits and
  commit conflicts per million messages (every server's /metrics). Checked:
  the topic's head equals the number of message ids the servers returned
  (nothing lost, nothing written twice).
- ``pull + ack``: 4 consumer processes spread over the servers the same way
  drain the subscription (pull of 1,000, then one acknowledge) for at most
  ``--seconds``. Reported: acknowledged messages/s, commits and conflicts per
  million acknowledged.

Writes bench/results/scaleout.md (scaleout-s3.md with ``--s3``; ``-quick``
with ``--quick``). This is the measurement behind issue 17 (scale-out): one
topic is one Delta table, so N processes race on its log.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import multiprocessing as mp
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from multiprocessing.synchronize import Barrier
from pathlib import Path
from typing import TYPE_CHECKING, TypeAlias

import httpx
import orjson

from bench import workload as w
from bench.peer_lakepubsub import (
    _COMMITS,
    _CONFLICTS,
    BUCKET,
    PROJECT,
    REPO,
    MotoS3,
    _wait_healthy,
    _wait_listening,
)

if TYPE_CHECKING:
    from multiprocessing.queues import Queue

RESULTS = Path(__file__).parent / "results"
CONSUMERS = 4
PULL_MAX = 1000
TIMEOUT_S = 120.0
# What each client process sends back: ("ok", its server, its count) or ("error", server, text).
Results: TypeAlias = "Queue[tuple[str, str, int | str]]"


@dataclass(frozen=True)
class Phase:
    servers: int
    phase: str
    messages: int
    seconds: float
    shares: tuple[float, ...]
    commits: int
    conflicts: int

    @property
    def rate(self) -> float:
        return self.messages / self.seconds if self.seconds else 0.0

    def per_million(self, count: int) -> float:
        return count * 1_000_000 / self.messages if self.messages else 0.0


@contextlib.contextmanager
def servers_on_one_lake(count: int, s3: bool) -> Iterator[tuple[list[str], str, dict[str, str]]]:
    """``count`` API processes on one fresh lake: their URLs, the lake, its storage options."""
    directory = Path(tempfile.mkdtemp(prefix="bench-scaleout-"))
    processes: list[subprocess.Popen[bytes]] = []
    with contextlib.ExitStack() as stack:
        options: dict[str, str] = {}
        lake = str(directory / "lake")
        if s3:
            moto = stack.enter_context(MotoS3(directory))
            options = moto.storage_options
            lake = f"s3://{BUCKET}/lake"
        env = {k: v for k, v in os.environ.items() if not k.startswith(("LAKEPUBSUB_", "AWS_"))}
        env.update(options, LAKEPUBSUB_LAKE=lake, LAKEPUBSUB_PULL_WAIT_S="1")
        urls = []
        try:
            for i in range(count):
                log_path = directory / f"server-{i}.log"
                with log_path.open("wb") as log:
                    process = subprocess.Popen(
                        [
                            sys.executable, "-m", "uvicorn", "api.app:create_app", "--factory",
                            "--host", "127.0.0.1", "--port", "0", "--no-access-log",
                            "--log-level", "info",
                        ],
                        cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
                    )  # fmt: skip
                processes.append(process)
                url = f"http://127.0.0.1:{_wait_listening(process, log_path)}"
                _wait_healthy(process, f"{url}/healthz", log_path)
                urls.append(url)
            yield urls, lake, options
        finally:
            for process in processes:
                process.terminate()
            for process in processes:
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    process.kill()
            shutil.rmtree(directory, ignore_errors=True)


def counters(urls: list[str]) -> tuple[int, int]:
    """Delta commits and commit conflicts so far, summed over every server."""
    commits = conflicts = 0.0
    for url in urls:
        for line in httpx.get(f"{url}/metrics", timeout=TIMEOUT_S).text.splitlines():
            name, _, rest = line.partition("{")
            if name == _COMMITS:
                commits += float(rest.rpartition(" ")[2])
            elif name == _CONFLICTS:
                conflicts += float(rest.rpartition(" ")[2])
    return round(commits), round(conflicts)


def _publisher(
    url: str, topic: str, batch: int, seconds: float, barrier: Barrier, out: Results
) -> None:
    data = base64.b64encode(w.payload(0)).decode()
    body = orjson.dumps({"messages": [{"data": data} for _ in range(batch)]})
    sent = 0
    with httpx.Client(base_url=url, timeout=TIMEOUT_S) as client:
        client.get("/healthz").raise_for_status()
        barrier.wait(TIMEOUT_S)
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            response = client.post(
                f"/v1/{topic}:publish", content=body, headers={"content-type": "application/json"}
            )
            if response.status_code != 200:
                out.put(("error", url, f"HTTP {response.status_code}: {response.text[:300]}"))
                return
            sent += len(orjson.loads(response.content)["messageIds"])
    out.put(("ok", url, sent))


def _consumer(url: str, sub: str, seconds: float, barrier: Barrier, out: Results) -> None:
    acked = 0
    pull = orjson.dumps({"maxMessages": PULL_MAX})
    json = {"content-type": "application/json"}
    with httpx.Client(base_url=url, timeout=TIMEOUT_S) as client:
        client.get("/healthz").raise_for_status()
        barrier.wait(TIMEOUT_S)
        end = time.monotonic() + seconds
        empty = 0
        while time.monotonic() < end and empty < 2:
            response = client.post(f"/v1/{sub}:pull", content=pull, headers=json)
            if response.status_code != 200:
                out.put(("error", url, f"HTTP {response.status_code}: {response.text[:300]}"))
                return
            received = orjson.loads(response.content).get("receivedMessages", [])
            if not received:
                empty += 1
                continue
            empty = 0
            ack = orjson.dumps({"ackIds": [r["ackId"] for r in received]})
            response = client.post(f"/v1/{sub}:acknowledge", content=ack, headers=json)
            if response.status_code != 200:
                out.put(("error", url, f"HTTP {response.status_code}: {response.text[:300]}"))
                return
            acked += len(received)
    out.put(("ok", url, acked))


def timed(
    target: object, urls: list[str], count: int, args: tuple[object, ...]
) -> tuple[float, dict[str, int]]:
    """Run ``count`` client processes (client i on server i mod N) together; wall s, per server."""
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(count + 1)
    out: Results = ctx.Queue()
    procs = [
        ctx.Process(target=target, args=(urls[i % len(urls)], *args, barrier, out))  # type: ignore[arg-type]
        for i in range(count)
    ]
    for p in procs:
        p.start()
    barrier.wait(TIMEOUT_S)
    start = time.monotonic()
    per_server = dict.fromkeys(urls, 0)
    for _ in procs:
        status, url, value = out.get(timeout=TIMEOUT_S + 60)
        if status != "ok":
            raise SystemExit(f"a client of {url} failed: {value}")
        per_server[url] += int(value)
    wall = time.monotonic() - start
    for p in procs:
        p.join()
    return wall, per_server


def run_servers(n: int, clients: int, batch: int, seconds: float, s3: bool) -> list[Phase]:
    with servers_on_one_lake(n, s3) as (urls, lake, options):
        topic = f"projects/{PROJECT}/topics/scale-{uuid.uuid4().hex[:8]}"
        sub = f"projects/{PROJECT}/subscriptions/scale-{uuid.uuid4().hex[:8]}"
        httpx.put(f"{urls[0]}/v1/{topic}", json={}, timeout=TIMEOUT_S).raise_for_status()
        httpx.put(
            f"{urls[0]}/v1/{sub}",
            json={"topic": topic, "ackDeadlineSeconds": 60},
            timeout=TIMEOUT_S,
        ).raise_for_status()
        phases = []
        before = counters(urls)
        wall, per = timed(_publisher, urls, clients, (topic, batch, seconds))
        after = counters(urls)
        published = sum(per.values())
        head = stored_head(lake, options, topic)
        if head != published:
            raise SystemExit(
                f"{n} servers: the servers returned {published} ids, the topic holds {head}"
            )
        phases.append(
            Phase(n, "publish", published, wall, _shares(per, published),
                  after[0] - before[0], after[1] - before[1])
        )  # fmt: skip
        before = after
        wall, per = timed(_consumer, urls, CONSUMERS, (sub, seconds))
        after = counters(urls)
        acked = sum(per.values())
        phases.append(
            Phase(n, "pull + ack", acked, wall, _shares(per, acked),
                  after[0] - before[0], after[1] - before[1])
        )  # fmt: skip
        return phases


def stored_head(lake: str, options: dict[str, str], topic: str) -> int:
    """How many messages the topic's table holds (offsets are dense from 0)."""
    from lakepubsub import Engine, Settings
    from lakepubsub.names import TopicName

    engine = Engine(Settings(lake=lake, storage_options=options))
    try:
        return int(engine.topic_head(TopicName.parse(topic)))
    finally:
        engine.close()


def _shares(per: dict[str, int], total: int) -> tuple[float, ...]:
    return tuple(v / total if total else 0.0 for v in per.values())


def report(phases: list[Phase], args: argparse.Namespace) -> str:
    where = "moto S3" if args.s3 else "local lake"
    one = {p.phase: p.rate for p in phases if p.servers == 1}
    lines = [
        f"# One topic, one subscription, several API processes ({where})",
        "",
        f"`python -m bench.scaleout_bench --servers {args.servers} --seconds {args.seconds:g}"
        f" --clients {args.clients}{' --s3' if args.s3 else ''}`"
        f" · {time.strftime('%Y-%m-%d %H:%M')}"
        f" UTC · {os.cpu_count()} cores, {platform.machine()} · load average"
        f" {os.getloadavg()[0]:.1f} at the end. Publishers send batches of {args.batch} 1 KiB"
        f" messages back to back, client i to server i mod N; {CONSUMERS} consumers pull"
        f" {PULL_MAX} and ack. Every server, client and the lake share the machine's cores.",
        "",
        "| servers | phase | messages | msgs/s | vs 1 server | each server's share"
        " | commits / 1M | conflicts / 1M |",
        "| ---: | --- | ---: | ---: | ---: | --- | ---: | ---: |",
    ]
    for p in phases:
        base = one.get(p.phase)
        ratio = f"{p.rate / base:.2f}x" if base else ""
        shares = " / ".join(f"{s:.0%}" for s in p.shares)
        lines.append(
            f"| {p.servers} | {p.phase} | {p.messages:,} | {p.rate:,.0f} | {ratio} | {shares} |"
            f" {p.per_million(p.commits):,.0f} | {p.per_million(p.conflicts):,.0f} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else "")
    parser.add_argument("--servers", default="1,2", help="server counts, comma-separated")
    parser.add_argument("--seconds", type=float, default=10.0, help="length of each phase")
    parser.add_argument("--clients", type=int, default=8, help="publishing clients")
    parser.add_argument("--batch", type=int, default=100, help="messages per publish")
    parser.add_argument("--s3", action="store_true", help="the lake on a moto S3 server")
    parser.add_argument("--quick", action="store_true", help="2 s phases (CI)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="report directory")
    args = parser.parse_args()
    if args.quick:
        args.seconds = 2.0
    phases: list[Phase] = []
    for n in (int(s) for s in args.servers.split(",")):
        phases += run_servers(n, args.clients, args.batch, args.seconds, args.s3)
        print(f"{n} server(s) done", file=sys.stderr)
    text = report(phases, args)
    args.out.mkdir(parents=True, exist_ok=True)
    name = "scaleout" + ("-s3" if args.s3 else "") + ("-quick" if args.quick else "") + ".md"
    (args.out / name).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
