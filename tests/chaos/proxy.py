"""A fault-injecting HTTP/1.1 proxy for the S3 endpoint (moto) the service talks to.

    python -m tests.chaos.proxy --upstream http://127.0.0.1:5000 --port 5001 \
        --error 0.05 --delay 0.05 --drop 0.02 --commit-error-after 0.2

The service's ``AWS_ENDPOINT_URL`` points here; every request is forwarded to
the upstream unless a fault is drawn for it. Faults, each drawn per request
with its own probability:

- ``error``: answer 500 or 503 (S3 XML error body) without forwarding;
- ``error_after``: forward (the write takes effect), then answer 500/503;
- ``drop``: close the connection without forwarding or answering;
- ``drop_after``: forward, then close the connection without answering;
- ``delay``: wait up to ``delay_s`` (uniformly) before forwarding.

The "after" faults are the ambiguous ones: the client cannot know whether its
write landed. Delta commit PUTs (``PUT .../_delta_log/...``) get their own
fault rates, so commits can be hit harder than reads.

The proxy runs in its own process: delta-rs holds the GIL while it waits on
the network, so a proxy thread inside a process that calls delta-rs would
stall. A small control endpoint (``--control-port``) switches faults on and
off and reports counts; ``ProxyProcess`` drives it from the harness.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any
from urllib.parse import urlparse

import httpx

from bench.harness.ports import free_port, wait_for_port
from tests.chaos.servers import REPO

_ERROR_CODES = {500: "InternalError", 503: "SlowDown"}
_FAULT_KINDS = ("error", "error_after", "drop", "drop_after")


@dataclass(frozen=True)
class Faults:
    """Per-request fault probabilities (each in [0, 1]) and the longest delay."""

    error: float = 0.0
    error_after: float = 0.0
    drop: float = 0.0
    drop_after: float = 0.0
    delay: float = 0.0
    delay_s: float = 0.5

    def draw(self, rng: random.Random) -> tuple[str, float]:
        """The fault for one request ("" for none) and its delay in seconds."""
        wait = rng.uniform(0, self.delay_s) if rng.random() < self.delay else 0.0
        roll = rng.random()
        for kind in _FAULT_KINDS:
            chance: float = getattr(self, kind)
            if roll < chance:
                return kind, wait
            roll -= chance
        return "", wait


COMMIT_MATCH = "/_delta_log/"


def is_commit(method: str, target: str, match: str = COMMIT_MATCH) -> bool:
    """A Delta commit (or checkpoint) write: a PUT of a key under ``_delta_log/``.

    ``match`` narrows it, e.g. ``/catalog/_delta_log/`` for the catalog's commits.
    """
    return method == "PUT" and match in target.split("?", 1)[0]


class FaultProxy:
    """The proxy's state and request handling (runs on one asyncio loop)."""

    def __init__(self, upstream: str, *, seed: int | None = None) -> None:
        parsed = urlparse(upstream)
        self.upstream_host = parsed.hostname or "127.0.0.1"
        self.upstream_port = parsed.port or 80
        self.faults = Faults()
        self.commit_faults = Faults()
        self.enabled = False
        self.commit_match = COMMIT_MATCH
        # A script overrides the commit fault rates: its entries are the faults of the
        # next matching commit requests, in order ("" for none).
        self.script: list[str] = []
        self.counts: Counter[str] = Counter()  # "{class}/{outcome}"
        self._rng = random.Random(seed)

    async def serve(self, port: int, control_port: int) -> None:
        proxy = await asyncio.start_server(self._client, "127.0.0.1", port, backlog=512)
        control = await asyncio.start_server(self._control, "127.0.0.1", control_port)
        async with proxy, control:
            await asyncio.gather(proxy.serve_forever(), control.serve_forever())

    def configure(self, doc: dict[str, Any]) -> None:
        if "faults" in doc:
            self.faults = Faults(**doc["faults"])
        if "commit_faults" in doc:
            self.commit_faults = Faults(**doc["commit_faults"])
        if "enabled" in doc:
            self.enabled = bool(doc["enabled"])
        if "commit_match" in doc:
            self.commit_match = str(doc["commit_match"])
        if "script" in doc:
            self.script = [str(f) for f in doc["script"]]

    async def _control(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """``GET /stats`` gives the counts; ``PUT /faults`` takes a ``configure`` document."""
        try:
            request = await _read_message(reader, writer, is_request=True)
            if request is not None and request.start.startswith(b"PUT"):
                self.configure(json.loads(request.body))
            body = json.dumps({"enabled": self.enabled, "counts": self.counts}).encode()
            writer.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\n"
                + f"content-length: {len(body)}\r\n\r\n".encode()
                + body
            )
            await writer.drain()
        finally:
            writer.close()

    # -- one client connection -------------------------------------------------------------

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while await self._exchange(reader, writer):
                pass
        except (ConnectionError, asyncio.IncompleteReadError, ValueError):
            return
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _exchange(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """Serve one request; False when the client connection is to be closed."""
        request = await _read_message(reader, writer, is_request=True)
        if request is None:
            return False
        method, target = request.start.split(b" ", 2)[:2]
        commit = is_commit(method.decode(), target.decode(), self.commit_match)
        kind = "commit" if commit else "other"
        faults = self.commit_faults if kind == "commit" else self.faults
        fault, wait = faults.draw(self._rng) if self.enabled else ("", 0.0)
        if self.enabled and kind == "commit" and self.script:
            fault, wait = self.script.pop(0), 0.0
        self.counts[f"{kind}/requests"] += 1
        if wait:
            self.counts[f"{kind}/delayed"] += 1
            await asyncio.sleep(wait)
        if fault:
            self.counts[f"{kind}/{fault}"] += 1
        if fault == "drop":
            return False
        if fault == "error":
            await _send_error(writer, self._rng.choice(list(_ERROR_CODES)))
            return True
        # A fresh upstream connection per request: moto may close idle ones, and a
        # request lost on a reused connection would look like an injected drop.
        up_reader, up_writer = await asyncio.open_connection(self.upstream_host, self.upstream_port)
        try:
            up_writer.write(request.encode(connection=b"close"))
            await up_writer.drain()
            response = await _read_message(
                up_reader, None, is_request=False, head_only=method == b"HEAD"
            )
        finally:
            up_writer.close()
        if response is None or fault == "drop_after":
            return False
        if fault == "error_after":
            await _send_error(writer, self._rng.choice(list(_ERROR_CODES)))
            return True
        writer.write(response.encode(connection=b"keep-alive", head_only=method == b"HEAD"))
        await writer.drain()
        return not request.closes


@dataclass
class _Message:
    start: bytes
    headers: list[tuple[bytes, bytes]]
    body: bytes
    chunked: bool

    @property
    def closes(self) -> bool:
        return any(k == b"connection" and v.lower() == b"close" for k, v in self.headers)

    def encode(self, *, connection: bytes, head_only: bool = False) -> bytes:
        """The message to forward, with its own Connection header and an exact length."""
        lines = [self.start]
        for key, value in self.headers:
            if key in (b"connection", b"keep-alive", b"expect"):
                continue
            if key == b"content-length" and not head_only:
                continue
            lines.append(key + b": " + value)
        if not self.chunked and not head_only:
            lines.append(b"content-length: " + str(len(self.body)).encode())
        lines.append(b"connection: " + connection)
        return b"\r\n".join(lines) + b"\r\n\r\n" + self.body


async def _send_error(writer: asyncio.StreamWriter, status: int) -> None:
    code = _ERROR_CODES[status]
    body = (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Error><Code>{code}</Code><Message>injected by tests.chaos.proxy</Message>"
        "<RequestId>chaos</RequestId></Error>"
    ).encode()
    reason = "Internal Server Error" if status == 500 else "Service Unavailable"
    head = (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/xml\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    writer.write(head + body)
    await writer.drain()


async def _read_message(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter | None,
    *,
    is_request: bool,
    head_only: bool = False,
) -> _Message | None:
    """One HTTP/1.1 message; None at a clean end of the stream.

    A request's ``Expect: 100-continue`` is answered here, and a response's 1xx
    interim heads are skipped.
    """
    while True:
        try:
            raw = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError as exc:
            if exc.partial.strip():
                raise
            return None
        except asyncio.LimitOverrunError as exc:
            raise ValueError("message head too long") from exc
        lines = raw.split(b"\r\n")
        headers = []
        for line in lines[1:]:
            if line:
                name, _, value = line.partition(b":")
                headers.append((name.strip().lower(), value.strip()))
        if is_request or not lines[0].split(b" ")[1].startswith(b"1"):
            break
    found = dict(headers)
    if is_request and found.get(b"expect", b"").lower() == b"100-continue" and writer:
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        await writer.drain()
    chunked = found.get(b"transfer-encoding", b"").lower() == b"chunked"
    status = b"" if is_request else lines[0].split(b" ")[1]
    if head_only or status in (b"204", b"304"):
        body = b""
    elif chunked:
        body = await _read_chunked(reader)
    elif b"content-length" in found:
        body = await reader.readexactly(int(found[b"content-length"]))
    elif is_request:
        body = b""
    else:
        body = await reader.read()  # delimited by the end of the connection
    return _Message(lines[0], headers, body, chunked)


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    raw = bytearray()
    while True:
        size_line = await reader.readuntil(b"\r\n")
        raw += size_line
        size = int(size_line.split(b";", 1)[0].strip(), 16)
        if size == 0:
            while True:  # trailers, up to the empty line
                line = await reader.readuntil(b"\r\n")
                raw += line
                if line == b"\r\n":
                    return bytes(raw)
        raw += await reader.readexactly(size + 2)


class ProxyProcess:
    """The proxy as a subprocess of the harness, with its control endpoint."""

    def __init__(self, upstream: str, *, seed: int | None = None) -> None:
        self.port = free_port()
        self.control_port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        args = ["--upstream", upstream, "--port", str(self.port)]
        args += ["--control-port", str(self.control_port)]
        if seed is not None:
            args += ["--seed", str(seed)]
        self._process = subprocess.Popen(
            [sys.executable, "-m", "tests.chaos.proxy", *args], cwd=REPO
        )
        wait_for_port(self.control_port)

    def configure(
        self,
        *,
        enabled: bool | None = None,
        faults: Faults | None = None,
        commit_faults: Faults | None = None,
        commit_match: str | None = None,
        script: list[str] | None = None,
    ) -> None:
        """Change the faults; a ``script`` lists the faults of the next commit requests."""
        doc: dict[str, Any] = {}
        if commit_match is not None:
            doc["commit_match"] = commit_match
        if script is not None:
            doc["script"] = script
        if enabled is not None:
            doc["enabled"] = enabled
        if faults is not None:
            doc["faults"] = asdict(faults)
        if commit_faults is not None:
            doc["commit_faults"] = asdict(commit_faults)
        httpx.put(f"http://127.0.0.1:{self.control_port}/faults", json=doc, timeout=10)

    def counts(self) -> Counter[str]:
        doc = httpx.get(f"http://127.0.0.1:{self.control_port}/stats", timeout=10).json()
        return Counter(doc["counts"])

    def stop(self) -> None:
        self._process.terminate()
        self._process.wait(timeout=10)

    def __enter__(self) -> ProxyProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description="Fault-injecting HTTP proxy for S3 (moto).")
    parser.add_argument("--upstream", required=True, help="e.g. http://127.0.0.1:5000")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--control-port", type=int, default=0)
    parser.add_argument("--seed", type=int, default=None)
    for kind in (*_FAULT_KINDS, "delay"):
        flag = kind.replace("_", "-")
        parser.add_argument(f"--{flag}", type=float, default=0.0, help="fraction of requests")
        parser.add_argument(f"--commit-{flag}", type=float, default=None, help="for commit PUTs")
    parser.add_argument("--delay-s", type=float, default=0.5)
    args = parser.parse_args()
    names = (*_FAULT_KINDS, "delay")
    faults = {n: getattr(args, n) for n in names}
    overrides = {n: getattr(args, f"commit_{n}") for n in names}
    commit = {n: faults[n] if overrides[n] is None else overrides[n] for n in names}
    proxy = FaultProxy(args.upstream, seed=args.seed)
    proxy.configure(
        {
            "enabled": any(faults.values()) or any(commit.values()),
            "faults": {**faults, "delay_s": args.delay_s},
            "commit_faults": {**commit, "delay_s": args.delay_s},
        }
    )
    control = args.control_port or free_port()
    print(
        f"fault proxy on 127.0.0.1:{args.port} -> {args.upstream}; control :{control}", flush=True
    )
    # Stopped by a signal: nothing to flush, so leave at once and quietly.
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(proxy.serve(args.port, control))


if __name__ == "__main__":
    main()
