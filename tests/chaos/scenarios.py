"""The load scenarios: crash (SIGKILL), storage faults, and concurrency.

Each runs publishers and consumers over HTTP against real API server
processes, then drains the subscriptions with the faults off and checks the
invariants against the lake as stored (``verify.LakeView``).
"""

from __future__ import annotations

import contextlib
import functools
import random
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.chaos import admin
from tests.chaos import workload as w
from tests.chaos.ledger import Ledger
from tests.chaos.proxy import Faults, ProxyProcess
from tests.chaos.servers import (
    ApiServer,
    Lake,
    local_lake,
    moto_server,
    s3_lake,
    unhandled_errors,
)
from tests.chaos.verify import LakeView, Result

TOPIC = "chaos-topic"
# Both subscription kinds, with the shortest ack deadline Pub/Sub allows.
SUBSCRIPTIONS = {"chaos-plain": (10, False), "chaos-exactly-once": (10, True)}
# The drain waits out leases held by clients that went away (ack deadline + margin).
DRAIN_TIMEOUT_S = 90.0


@dataclass(frozen=True)
class Size:
    """How hard a scenario pushes."""

    seconds: float  # load duration (crash: the kills set the duration)
    publishers: int
    consumers_per_sub: int
    kills: int = 0
    servers: int = 1
    admin_pairs: int = 0  # storage: topics + subscriptions created under commit faults


QUICK = {
    "crash": Size(seconds=0, publishers=2, consumers_per_sub=1, kills=3),
    "storage": Size(seconds=10, publishers=2, consumers_per_sub=1, admin_pairs=3),
    "concurrency": Size(seconds=10, publishers=3, consumers_per_sub=2, servers=2),
}
FULL = {
    "crash": Size(seconds=0, publishers=3, consumers_per_sub=2, kills=20),
    "storage": Size(seconds=60, publishers=3, consumers_per_sub=2, admin_pairs=10),
    "concurrency": Size(seconds=60, publishers=6, consumers_per_sub=3, servers=3),
}

# Storage faults: every request, and Delta commit PUTs (hit harder).
STORAGE_FAULTS = Faults(error=0.03, error_after=0.01, drop=0.01, drop_after=0.01, delay=0.05)
COMMIT_FAULTS = Faults(error=0.08, error_after=0.05, drop=0.03, drop_after=0.04, delay=0.1)


class Load:
    """Publisher and consumer threads on a set of servers, with one ledger."""

    def __init__(
        self, urls: list[str], ledger: Ledger, size: Size, behaviour: w.Behaviour, seed: int
    ) -> None:
        self.stop = threading.Event()
        self.apis: list[w.Api] = []
        targets: list[Callable[[], None]] = []
        for i in range(size.publishers):
            api = self._api(urls, ledger, seed * 1000 + i)
            tag = f"p{i}-{w.unique_tag()}"
            targets.append(functools.partial(w.publisher, api, ledger, TOPIC, self.stop, tag))
        for j, sub in enumerate(SUBSCRIPTIONS):
            for k in range(size.consumers_per_sub):
                api = self._api(urls, ledger, seed * 1000 + 100 + j * 10 + k)
                consume = functools.partial(w.consumer, api, ledger, sub, self.stop, behaviour)
                targets.append(consume)
        self.threads = w.run_threads(targets)

    def _api(self, urls: list[str], ledger: Ledger, seed: int) -> w.Api:
        api = w.Api(urls, ledger, seed=seed)
        self.apis.append(api)
        return api

    def finish(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=w.REQUEST_TIMEOUT_S + 10)
        for api in self.apis:
            api.close()


@contextlib.contextmanager
def servers(lake: Lake, count: int, env: dict[str, str] | None = None) -> Iterator[list[ApiServer]]:
    """Started API servers, each logging to its own file (read by ``_finish``)."""
    started: list[ApiServer] = []
    with tempfile.TemporaryDirectory(prefix="lakepubsub-chaos-logs-") as logs:
        try:
            for i in range(count):
                server = ApiServer(lake, log=Path(logs) / f"server-{i}.log", env=env)
                server.start()
                started.append(server)
            yield started
        finally:
            for server in started:
                server.stop()


def _setup(urls: list[str], ledger: Ledger) -> None:
    for name, (deadline, exactly_once) in SUBSCRIPTIONS.items():
        ledger.add_subscription(name, ack_deadline_s=deadline, exactly_once=exactly_once)
    api = w.Api(urls, ledger, seed=0)
    try:
        w.create_resources(api, TOPIC, SUBSCRIPTIONS)
    finally:
        api.close()


def _finish(
    result: Result,
    lake: Lake,
    running: list[ApiServer],
    ledger: Ledger,
    allowed_5xx: frozenset[str],
) -> None:
    """Drain with the faults off, then check the invariants against the stored lake."""
    started = time.monotonic()
    with LakeView(lake) as view:
        drained = w.drain(
            [s.url for s in running],
            ledger,
            list(SUBSCRIPTIONS),
            lambda sub: view.drained(TOPIC, sub),
            DRAIN_TIMEOUT_S,
        )
        stored = view.stored(TOPIC)
    result.notes.append(f"drain and verification: {time.monotonic() - started:.1f} s")
    found = ledger.check(stored)
    result.counts = vars(found).copy()
    result.check("progress", found.published > 0 and found.acked > 0, found.line())
    result.check("no-lost-publish", found.missing_from_topic == 0, "200 publish not in topic")
    result.check("all-delivered", found.undelivered == 0, "200 publish never delivered")
    result.check("no-duplicate-after-ack", found.duplicated_after_ack == 0)
    result.check("exactly-once-acked-once", found.acked_twice == 0)
    result.check("no-live-lease-overlap", found.live_lease_overlaps == 0)
    result.check("drained", all(drained.values()), str(drained))
    errors = ledger.server_errors(allowed_5xx)
    result.check("no-unexpected-5xx", errors == 0, _statuses(ledger))
    hangs = sum(n for (_, s), n in ledger.statuses.items() if s == "timeout")
    result.check("no-hang", hangs == 0, f"{hangs} requests timed out")
    result.notes.append("responses: " + _statuses(ledger))
    unhandled = [e for s in running if s.log for e in unhandled_errors(s.log)]
    result.check("no-unhandled-error", not unhandled, failures=sorted(set(unhandled)))


def _statuses(ledger: Ledger) -> str:
    return " ".join(f"{op}:{s}={n}" for (op, s), n in sorted(ledger.statuses.items()))


# -- crash ----------------------------------------------------------------------------------


def crash(size: Size, *, seed: int = 1, s3: bool = False) -> Result:
    """SIGKILL the API server at random moments under load, restart it, repeat."""
    result = Result("crash")
    rng = random.Random(seed)
    ledger = Ledger()
    # Every cycle commits here, so a confirmed ack is stored before the kill can
    # come: the strict invariants below (nothing delivered after its ack, no two
    # live leases) hold. With the lease flush window (a peered server's default:
    # 1 s locally, 30 s on S3) a SIGKILL redelivers what the window held, which
    # at-least-once allows (docs/architecture.md); tests/test_idle.py kills a
    # server under that window and checks what must still hold.
    every_cycle = {"LAKEPUBSUB_LEASE_FLUSH_MS": "0"}
    with _lake(s3) as lake, servers(lake, 1, every_cycle) as (server,):
        _setup([server.url], ledger)
        behaviour = w.Behaviour()
        load = Load([server.url], ledger, size, behaviour, seed)
        kills = 0
        try:
            for _ in range(size.kills):
                time.sleep(rng.uniform(0.3, 2.5))
                server.kill()
                kills += 1
                server.start()
            time.sleep(2.0)  # load on the last incarnation too
        finally:
            load.finish()
        result.check("kills", kills >= size.kills, f"{kills} SIGKILLs, {server.starts} starts")
        _finish(result, lake, [server], ledger, frozenset())
    starts = sorted(server.start_seconds)
    result.notes.insert(
        0,
        f"{kills} SIGKILLs under load; restart to serving: median "
        f"{starts[len(starts) // 2]:.1f} s, max {starts[-1]:.1f} s",
    )
    return result


@contextlib.contextmanager
def _lake(s3: bool) -> Iterator[Lake]:
    if not s3:
        with local_lake() as lake:
            yield lake
        return
    with moto_server() as endpoint:
        yield s3_lake(endpoint)


# -- storage faults -------------------------------------------------------------------------


def storage(size: Size, *, seed: int = 2) -> Result:
    """A fault-injecting proxy between the service and S3 (moto), under load."""
    result = Result("storage")
    ledger = Ledger()
    with (
        moto_server() as endpoint,
        ProxyProcess(endpoint, seed=seed) as proxy,
    ):
        lake = s3_lake(endpoint).via(proxy.url)
        proxy.configure(enabled=False, faults=STORAGE_FAULTS, commit_faults=COMMIT_FAULTS)
        with servers(lake, 1) as (server,):
            _setup([server.url], ledger)
            load = Load([server.url], ledger, size, w.Behaviour(), seed)
            proxy.configure(enabled=True)
            try:
                time.sleep(size.seconds)
            finally:
                proxy.configure(enabled=False)
                load.finish()
            counts = proxy.counts()
            injected = sum(n for k, n in counts.items() if not k.endswith("/requests"))
            result.check("faults-injected", injected > 0, f"{injected} faults")
            _finish(result, lake, [server], ledger, frozenset({"503"}))
            result.notes.append("proxy: " + " ".join(f"{k}={n}" for k, n in sorted(counts.items())))
            _admin(result, server.url, proxy, size.admin_pairs)
    return result


def _admin(result: Result, url: str, proxy: ProxyProcess, pairs: int) -> None:
    outcome = admin.run(url, proxy, pairs=pairs)
    statuses = " ".join(f"{p}={s}" for p, s in outcome.creates.items())
    result.notes.append(f"creates under commit faults: {statuses}")
    errors, broken = outcome.server_errors, outcome.broken
    result.check("admin-no-unexpected-5xx", not errors, failures=errors)
    result.check("admin-consistent", not broken, failures=broken)


# -- concurrency ----------------------------------------------------------------------------


# Random deadlines: extensions, nacks, and 1 s deadlines acked late (stale ack ids).
CONTENDED = w.Behaviour(nack=0.05, forget=0.02, extend=0.08, short_deadline=0.03)


def concurrency(size: Size, *, seed: int = 3, s3: bool = False) -> Result:
    """Several API processes on one lake; every client spreads requests over all of them."""
    result = Result("concurrency")
    ledger = Ledger()
    with _lake(s3) as lake, servers(lake, size.servers) as running:
        urls = [s.url for s in running]
        _setup(urls, ledger)
        load = Load(urls, ledger, size, CONTENDED, seed)
        try:
            time.sleep(size.seconds)
        finally:
            load.finish()
        _finish(result, lake, running, ledger, frozenset())
        result.notes.append(f"{size.servers} API processes")
        result.notes.extend(_conflict_report(running, ledger))
    return result


def _conflict_report(running: list[ApiServer], ledger: Ledger) -> list[str]:
    """Commit conflicts (each one retried) and commits per 1,000 client operations."""
    conflicts: dict[str, float] = {}
    commits: dict[str, float] = {}
    for server in running:
        for (name, labels), value in server.metrics().items():
            table = labels.partition('table="')[2].partition('"')[0]
            if name == "lakepubsub_commit_conflicts_total":
                conflicts[table] = conflicts.get(table, 0) + value
            elif name == "lakepubsub_delta_commits_total":
                commits[table] = commits.get(table, 0) + value
    ops = max(1, ledger.operations())
    aborted = sum(n for (_, s), n in ledger.statuses.items() if s == "409")
    lines = [f"client operations: {ops}; 409 ABORTED (retries exhausted): {aborted}"]
    for table in sorted(set(conflicts) | set(commits)):
        lines.append(
            f"{table}: {conflicts.get(table, 0) * 1000 / ops:.1f} conflicts (retries) and "
            f"{commits.get(table, 0) * 1000 / ops:.1f} commits per 1,000 operations"
        )
    return lines
