"""This process's own S3 requests through boto3, counted by kind, and what they cost.

Every HTTP attempt a watched boto3 client sends (retries too: S3 bills each) is
counted through botocore's ``before-send`` event, by billing kind. Requests that
delta-rs makes itself (opening tables, its commits, checkpoints and vacuum,
parquet files read through its object store) are sent from Rust and are not
counted here; ``bench/harness/s3_proxy.py`` counts every request from outside the process.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

KINDS = ("put", "copy", "post", "list", "get", "head", "delete")
# S3 Standard list prices per 1,000 requests (aws.amazon.com/s3/pricing): PUT, COPY,
# POST and LIST $0.005; GET, HEAD and all other requests $0.0004; DELETE is free.
USD_PER_1000 = {
    "put": 0.005,
    "copy": 0.005,
    "post": 0.005,
    "list": 0.005,
    "get": 0.0004,
    "head": 0.0004,
    "delete": 0.0,
}
SECONDS_PER_MONTH = 30 * 24 * 3600


def kind_of(method: str, operation: str) -> str:
    """The billing kind of one S3 request, from its HTTP method and operation name."""
    if operation in {"CopyObject", "UploadPartCopy"}:
        return "copy"
    if method == "GET":
        return "list" if operation.startswith("List") else "get"
    lowered = method.lower()
    return lowered if lowered in USD_PER_1000 else "get"


def cost_usd(counts: Mapping[str, int]) -> float:
    """What ``counts`` requests cost at S3 Standard list prices (kinds not priced: as GET)."""
    return sum(n * USD_PER_1000.get(kind, USD_PER_1000["get"]) / 1000 for kind, n in counts.items())


@dataclass(frozen=True, slots=True)
class Reading:
    """The counts since the meter started, and when it started (``time.time()``)."""

    since: float
    counts: Mapping[str, int]

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @property
    def cost_usd(self) -> float:
        return cost_usd(self.counts)


class Meter:
    """Counts the S3 requests of the boto3 clients it watches, and those the lake's
    object layer reports (``count``). Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts = dict.fromkeys(KINDS, 0)
        self._since = time.time()

    def watch(self, client: Any) -> Any:
        """Count every request ``client`` sends from now on; returns the client."""
        client.meta.events.register("before-send.s3", self._sent)
        return client

    def _sent(self, request: Any, event_name: str, **_: Any) -> None:
        # Returning None lets botocore send the request.
        kind = kind_of(request.method, event_name.rpartition(".")[2])
        with self._lock:
            self._counts[kind] = self._counts.get(kind, 0) + 1

    def count(self, kind: str) -> None:
        """Count one request sent by other means than a watched client (obstore)."""
        with self._lock:
            self._counts[kind] = self._counts.get(kind, 0) + 1

    def reading(self) -> Reading:
        with self._lock:
            return Reading(self._since, dict(self._counts))


# The process's meter: Lake's boto3 client is watched by it (lakepubsub/_lake/storage.py).
METER = Meter()
