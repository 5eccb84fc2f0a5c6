"""The backlog case of ``python -m bench s3``: a subscriber catching up reads a
topic's files in offset order, 1,000 messages a range, each file new to the
process (written by another one, or before a restart). With and without the
read-ahead on S3 (``lakepubsub/publish/decoded.py``, ``ReadAhead``): rows a
second and the requests counted at the proxy, by kind.

In process, on ``MessagesTable`` (the dispatcher's own read path), so the
figure is the storage's and not the rest of a delivery's; a pause after each
range stands for the rest of a dispatcher's cycle.
"""

from __future__ import annotations

import os
import time
import uuid
from dataclasses import dataclass

from bench.harness.moto_server import MotoServer
from bench.harness.s3_proxy import S3Proxy
from lakepubsub._lake import Lake
from lakepubsub.publish import batches
from lakepubsub.publish import messages_table as tables
from lakepubsub.publish.decoded import DECODED
from lakepubsub.publish.messages_table import MessagesTable, numbered
from lakepubsub.settings import Settings

RANGE = 1000  # messages a range, as a pull of 1,000
PAYLOAD_BYTES = 1024
CYCLE_S = 0.015  # the rest of a cycle of 1,000 deliveries (about 15 us each)


@dataclass
class BacklogResult:
    read_ahead: bool
    messages: int
    seconds: float
    kinds: dict[str, int]

    @property
    def rows_per_s(self) -> float:
        return self.messages / self.seconds


def run(files: int, profile: str, runs: int) -> list[BacklogResult]:
    """``files`` files of 1,000 messages, read in turn without and with read-ahead."""
    results = []
    with MotoServer("bench-backlog") as moto, S3Proxy(moto.endpoint, profile) as proxy:
        options = {**moto.storage_options, "AWS_ENDPOINT_URL": proxy.endpoint}
        lake = Lake(
            Settings(lake=f"s3://{moto.bucket}/{uuid.uuid4().hex}", storage_options=options)
        )
        tables.create_table(lake, "backlog")
        writer = MessagesTable(lake, "backlog")
        data = [os.urandom(PAYLOAD_BYTES) for _ in range(RANGE)]
        for i in range(files):
            columns = batches.checked(data, [None] * RANGE, [None] * RANGE).columns
            writer.append(numbered(columns, writer.head()), app_id="bench", txn_version=i + 1)
        ahead = tables.READ_AHEAD_FILES
        try:
            for _ in range(runs):
                for read_ahead in (False, True):
                    tables.READ_AHEAD_FILES = ahead if read_ahead else 0
                    results.append(_read(lake, files, proxy, read_ahead))
        finally:
            tables.READ_AHEAD_FILES = ahead
    return results


def _read(lake: Lake, files: int, proxy: S3Proxy, read_ahead: bool) -> BacklogResult:
    DECODED.clear()  # new to the process
    lake.objects.written.clear()
    reader = MessagesTable(lake, "backlog")
    reader.refresh()
    proxy.reset()
    started = time.perf_counter()
    rows = 0
    for lo in range(0, files * RANGE, RANGE):
        rows += reader.read_range(lo, lo + RANGE).num_rows
        time.sleep(CYCLE_S)
    seconds = time.perf_counter() - started
    counts = proxy.counts()
    kinds = counts.get("kinds")
    assert isinstance(kinds, dict)
    return BacklogResult(read_ahead, rows, seconds, {str(k): int(v) for k, v in kinds.items()})


def report(results: list[BacklogResult], profile: str) -> list[str]:
    lines = [
        "",
        f"## Backlog (profile `{profile}`)",
        "",
        "A reader new to the files reads a topic's backlog in ranges of 1,000 messages "
        f"(1 KiB each, files of 1,000), pausing {CYCLE_S * 1000:.0f} ms after each range "
        "(`bench/s3/backlog.py`).",
        "",
        "| read-ahead | messages | rows/s | GET | HEAD | other requests |",
        "|---|---|---|---|---|---|",
    ]
    for r in results:
        other = sum(n for k, n in r.kinds.items() if k not in ("get", "head"))
        lines.append(
            f"| {'yes' if r.read_ahead else 'no'} | {r.messages:,} | {r.rows_per_s:,.0f} "
            f"| {r.kinds.get('get', 0):,} | {r.kinds.get('head', 0):,} | {other:,} |"
        )
    return lines
