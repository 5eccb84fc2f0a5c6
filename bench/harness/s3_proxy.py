"""An S3 proxy the benchmarks and tests own: it counts requests and adds latency.

    python -m bench.harness.s3_proxy --upstream http://127.0.0.1:PORT [--profile standard]

It forwards every request to a moto S3 server unchanged (the ``Host`` header too, so
signatures still match) and answers no sooner than a first-byte delay drawn for the
request's billing class from the chosen profile (a directory bucket, ``...--x-s3``,
gets the Express profile whatever the chosen one); moto's and the proxy's own time
count toward that delay. It counts each request by kind and by key pattern (the key
with ids and numbers replaced by ``*``); ``GET /_proxy/counts`` returns the counts as
JSON and ``POST /_proxy/reset`` zeroes them. What the profiles are: bench/README.md,
"Counted at a proxy".

Written here because no maintained tool does both: moto can be slowed and
counted only by patching its responses, and its request log has neither the
list prefix nor a way to add latency. Starlette serves, httpx forwards.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import random
import re
import subprocess
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from bench.harness.ports import free_port
from bench.harness.processes import stop

KINDS = ("put", "post", "list", "get", "head", "delete")
CONTROL = "/_proxy/"
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0
# A tail whose p99 is about 4x the median: exp(2.326 * sigma) = 4.
LOGNORMAL_SIGMA = math.log(4) / 2.326
_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "upgrade", "host"}
_IDS = re.compile(r"[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}|\d+")


@dataclass(frozen=True)
class Profile:
    """First-byte delay medians in milliseconds, by billing class."""

    name: str
    put_ms: float
    get_ms: float

    def delay_s(self, kind: str) -> float:
        median = self.put_ms if kind in ("put", "post", "delete") else self.get_ms
        if median <= 0:
            return 0.0
        return random.lognormvariate(math.log(median), LOGNORMAL_SIGMA) / 1000


PROFILES = {
    "zero": Profile("zero", 0.0, 0.0),
    # S3 Standard's first byte as measured in-region: PUT ~50 ms, GET ~20 ms at the median.
    "standard": Profile("standard", 50.0, 20.0),
    "express": Profile("express", 5.0, 5.0),
}


# S3 Express One Zone directory buckets are named <base>--<zone id>--x-s3.
EXPRESS_BUCKET_SUFFIX = "--x-s3"


def directory_bucket(path: str) -> bool:
    """Whether a path-style request goes to a directory bucket (S3 Express One Zone)."""
    return path.strip("/").partition("/")[0].endswith(EXPRESS_BUCKET_SUFFIX)


def profile_of(profile: Profile, path: str) -> Profile:
    """A directory bucket answers at Express One Zone's latency whatever the
    profile of the others (a lake on Standard may keep its intake on Express)."""
    if profile.name != "zero" and directory_bucket(path):
        return PROFILES["express"]
    return profile


def request_kind(method: str, path: str, query: str) -> str:
    """The billing kind of an S3 request with path-style addressing."""
    if method == "GET":
        on_bucket = path.strip("/").count("/") == 0
        return "list" if on_bucket or "list-type" in query else "get"
    lowered = method.lower()
    return lowered if lowered in KINDS else "get"


def key_pattern(path: str, query: str) -> str:
    """``/bucket/lake/topics/<uuid>/_delta_log/00..12.json`` -> ``lake/topics/*/_delta_log/*.json``;
    a list is named by its prefix."""
    key = path.strip("/").partition("/")[2]
    if not key:
        key = parse_qs(query).get("prefix", [""])[0] + "(list)"
    return _IDS.sub("*", key)


class Counts:
    def __init__(self) -> None:
        self.kinds: Counter[str] = Counter()
        self.directory_kinds: Counter[str] = Counter()  # of those, to directory buckets
        self.keys: Counter[str] = Counter()
        self.since = time.monotonic()

    def add(self, kind: str, pattern: str, directory_bucket: bool = False) -> None:
        self.kinds[kind] += 1
        if directory_bucket:
            self.directory_kinds[kind] += 1
        self.keys[f"{kind} {pattern}"] += 1

    def as_json(self) -> dict[str, object]:
        return {
            "seconds": time.monotonic() - self.since,
            "kinds": dict(self.kinds),
            "directory_kinds": dict(self.directory_kinds),
            "keys": dict(self.keys.most_common()),
        }


def create_app(upstream: str, profile: Profile):  # type: ignore[no-untyped-def]

    counts = Counts()
    state: dict[str, httpx.AsyncClient] = {}

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        limits = httpx.Limits(max_connections=256, max_keepalive_connections=64)
        async with httpx.AsyncClient(base_url=upstream, limits=limits, timeout=60.0) as client:
            state["client"] = client
            yield

    async def control(request: Request) -> Response:
        nonlocal counts
        seen = counts
        if request.url.path.endswith("/reset"):
            counts = Counts()
        return JSONResponse(seen.as_json())

    async def forward(request: Request) -> Response:
        path, query = request.url.path, request.url.query
        kind = request_kind(request.method, path, query)
        counts.add(kind, key_pattern(path, query), directory_bucket(path))
        arrived = time.monotonic()
        delay = profile_of(profile, path).delay_s(kind)
        body = await request.body()
        headers = [(k, v) for k, v in request.headers.items() if k not in _HOP_BY_HOP]
        headers.append(("host", request.headers.get("host", "")))
        target = path + (f"?{query}" if query else "")
        answer = await state["client"].request(
            request.method, target, content=body, headers=headers
        )
        held = delay - (time.monotonic() - arrived)
        if held > 0:
            await asyncio.sleep(held)
        out = {k: v for k, v in answer.headers.items() if k.lower() not in _HOP_BY_HOP}
        out.pop("content-encoding", None)  # httpx has decoded the body
        if request.method != "HEAD":
            out["content-length"] = str(len(answer.content))
        return Response(answer.content, status_code=answer.status_code, headers=out)

    methods = ["GET", "PUT", "POST", "DELETE", "HEAD"]
    return Starlette(
        routes=[
            Route(CONTROL + "counts", control, methods=["GET"]),
            Route(CONTROL + "reset", control, methods=["POST"]),
            Route("/{path:path}", forward, methods=methods),
        ],
        lifespan=lifespan,
    )


class S3Proxy:
    """The proxy as a subprocess in front of ``upstream`` (its CPU is its own)."""

    def __init__(self, upstream: str, profile: str = "zero", log: Path | None = None) -> None:
        self.upstream = upstream
        self.profile = PROFILES[profile]
        self.endpoint = ""
        self._log = log
        self._process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> S3Proxy:
        port = free_port()
        out = self._log.open("wb") if self._log else subprocess.DEVNULL
        command = [sys.executable, "-m", "bench.harness.s3_proxy", "--upstream", self.upstream]
        command += ["--port", str(port), "--profile", self.profile.name]
        self._process = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, cwd=Path(__file__).parents[2]
        )
        self.endpoint = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                self.counts()
                return self
            except httpx.HTTPError:
                if self._process.poll() is not None or time.monotonic() > deadline:
                    self.__exit__()
                    raise RuntimeError("the S3 proxy did not start") from None
                time.sleep(0.05)

    def __exit__(self, *exc: object) -> None:
        if self._process is not None:
            stop(self._process, STOP_TIMEOUT_S)
            self._process = None

    @property
    def pid(self) -> int:
        assert self._process is not None
        return self._process.pid

    def counts(self) -> dict[str, object]:
        return dict(httpx.get(f"{self.endpoint}{CONTROL}counts", timeout=10).json())

    def reset(self) -> dict[str, object]:
        """Zero the counts; returns what they were."""
        return dict(httpx.post(f"{self.endpoint}{CONTROL}reset", timeout=10).json())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--profile", choices=sorted(PROFILES), default="zero")
    args = parser.parse_args()
    app = create_app(args.upstream, PROFILES[args.profile])
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
