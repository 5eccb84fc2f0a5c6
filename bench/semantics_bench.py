"""What delivery semantics cost over REST: plain, exactly-once and filtered pull + ack.

The three subscriptions, the backlog and the checks: bench/README.md, "Delivery
semantics". Runs alternate between the cases so load on the machine falls on all
alike; ``--quick`` shares one server (fresh topics still). Writes ``semantics.md``
and prints its tables.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import httpx
import orjson

from bench import peer_lakepubsub as lps
from bench import report as out
from bench import workload as w
from bench.clients import span_s as _span_s
from bench.harness.lakepubsub_server import (
    REQUEST_TIMEOUT_S,
    BenchError,
    LakePubSubServer,
    servers,
)

# The shared workload's pull + ack case: 4 consumers, Pub/Sub's maxMessages cap.
CONSUMERS = 4
MAX_MESSAGES_PER_PULL = 1000
# Message i carries BUCKET_ATTRIBUTE = str(i % BUCKETS); the filter takes one bucket.
BUCKETS = 10
BUCKET_ATTRIBUTE = "bucket"
MATCHING_BUCKET = "0"
FILTER = f'attributes.{BUCKET_ATTRIBUTE} = "{MATCHING_BUCKET}"'
# The product's targets: exactly-once keeps at least half the plain throughput;
# a filter costs at most 1.5x plain per delivered message.
EXACTLY_ONCE_MIN_RATIO = 0.5
FILTER_MAX_COST_RATIO = 1.5

PLAIN = "plain"
EXACTLY_ONCE = "exactly-once"
FILTERED = "filter 10%"

# Figures of one case; per-round ratios are Results of case RATIOS.
DELIVERED = "delivered"
DRAIN_S = "drain_s"
THROUGHPUT = "throughput"
SERVER_CPU_PER_MILLION = "server_cpu_per_million"
COMMITS_PER_MESSAGE = "commits_per_message"
RATIOS = "ratios"
EXACTLY_ONCE_RATIO = "exactly_once_throughput_ratio"
FILTER_COST_RATIO = "filter_cost_ratio"
EXACTLY_ONCE_CPU_RATIO = "exactly_once_cpu_ratio"
FILTER_CPU_RATIO = "filter_cpu_ratio"

_QUICK_NOTE = (
    "- `--quick`: a tiny backlog, for CI; the figures show that the harness works and "
    "say nothing about speed.",
)


@dataclass(frozen=True)
class Sizes:
    backlog: int
    runs: int
    # Every run on a fresh server and lake, or one server for all (fresh topics).
    fresh_server: bool
    quick: bool = False


FULL = Sizes(backlog=100_000, runs=3, fresh_server=True)
QUICK = Sizes(backlog=3_000, runs=1, fresh_server=False, quick=True)


@dataclass(frozen=True)
class Case:
    name: str
    # More fields of the subscription's REST body.
    subscription: dict[str, Any]
    filtered: bool = False

    def backlog(self, delivered: int) -> int:
        """The backlog to publish for this subscription to deliver ``delivered``."""
        return delivered * BUCKETS if self.filtered else delivered

    def expected(self, backlog: int) -> int:
        """How many of a ``backlog`` this subscription delivers."""
        return len(range(0, backlog, BUCKETS)) if self.filtered else backlog


CASES = (
    Case(PLAIN, {}),
    Case(EXACTLY_ONCE, {"enableExactlyOnceDelivery": True}),
    Case(FILTERED, {"filter": FILTER}, filtered=True),
)


def _publish_backlog(server: LakePubSubServer, topic: str, messages: int) -> None:
    """Publish ``messages`` with their bucket attribute, untimed, from this process."""

    def body(first: int) -> bytes:
        end = min(first + lps.PREFILL_BATCH, messages)
        return orjson.dumps(
            {
                "messages": [
                    {"data": lps._data(i), "attributes": {BUCKET_ATTRIBUTE: str(i % BUCKETS)}}
                    for i in range(first, end)
                ]
            }
        )

    path = f"/v1/{topic}:publish"
    with (
        lps._client(server.url, connections=lps.PREFILL_CLIENTS) as client,
        ThreadPoolExecutor(lps.PREFILL_CLIENTS) as senders,
    ):
        answers = senders.map(
            lambda first: lps._post(client, path, body(first)),
            range(0, messages, lps.PREFILL_BATCH),
        )
        published = sum(len(answer.get("messageIds", [])) for answer in answers)
    if published != messages:
        raise BenchError(f"published {messages} messages, got {published} ids")


def _subscribe(server: LakePubSubServer, topic: str, case: Case) -> str:
    subscription = server.create_subscription(
        topic, ack_deadline_s=w.full().ack_deadline_s, **case.subscription
    )
    # The API ignores fields it does not know: check that the options took.
    got = httpx.get(f"{server.url}/v1/{subscription}", timeout=REQUEST_TIMEOUT_S).json()
    if any(got.get(key) != value for key, value in case.subscription.items()):
        raise BenchError(f"asked for {case.subscription}, the server has {got}")
    return subscription


def _check_drained(server: LakePubSubServer, subscription: str) -> None:
    """One more pull finds nothing (and moves a filter's cursor past the last non-match)."""
    body = orjson.dumps({"maxMessages": MAX_MESSAGES_PER_PULL, "returnImmediately": True})
    with lps._client(server.url) as client:
        left = lps._post(client, f"/v1/{subscription}:pull", body).get("receivedMessages", [])
    if left:
        raise BenchError(f"{len(left)} messages were still delivered after the drain")


def run_case(server: LakePubSubServer, case: Case, backlog: int) -> list[w.Result]:
    """One run of ``case``: publish a backlog (untimed) to a fresh topic, drain it."""
    topic = server.create_topic()
    subscription = _subscribe(server, topic, case)
    _publish_backlog(server, topic, backlog)
    expected = case.expected(backlog)
    before = server.counters()
    reports, usage = lps.consume(
        server,
        subscription,
        total=expected,
        consumers=CONSUMERS,
        max_messages_per_pull=MAX_MESSAGES_PER_PULL,
        required_attribute=(BUCKET_ATTRIBUTE, MATCHING_BUCKET) if case.filtered else None,
    )
    after = server.counters()
    delivered = sum(r.messages for r in reports)
    redelivered = sum(r.redelivered for r in reports)
    if delivered != expected or redelivered:
        raise BenchError(
            f"{case.name}: {delivered} deliveries of {expected} expected messages, "
            f"{redelivered} of them redeliveries"
        )
    _check_drained(server, subscription)
    server.check_all_acked(topic, subscription, backlog)
    span_s = _span_s(reports)

    def result(metric: str, value: float) -> w.Result:
        return w.result(server.system, case.name, metric, "", value)

    return [
        result(DELIVERED, delivered),
        result(DRAIN_S, span_s),
        result(THROUGHPUT, delivered / span_s),
        result(SERVER_CPU_PER_MILLION, usage.cpu_s * w.MILLION / delivered),
        result(COMMITS_PER_MESSAGE, (after.commits - before.commits) / delivered),
    ]


def ratios(round_results: Sequence[w.Result]) -> list[w.Result]:
    """The targets' ratios within one round (one run of each case, run back to back)."""
    figure = {(r.case, r.metric): r.median for r in round_results}

    def relative(case: str, metric: str) -> float:
        # A tiny run can end within one CPU clock tick of the server: no ratio then.
        plain = figure[PLAIN, metric]
        return figure[case, metric] / plain if plain else math.nan

    def result(metric: str, value: float) -> w.Result:
        return w.result(lps.SYSTEM, RATIOS, metric, "", value)

    return [
        result(EXACTLY_ONCE_RATIO, relative(EXACTLY_ONCE, THROUGHPUT)),
        # Time per delivered message, relative: the inverse of the throughput ratio.
        result(FILTER_COST_RATIO, 1 / relative(FILTERED, THROUGHPUT)),
        result(EXACTLY_ONCE_CPU_RATIO, relative(EXACTLY_ONCE, SERVER_CPU_PER_MILLION)),
        result(FILTER_CPU_RATIO, relative(FILTERED, SERVER_CPU_PER_MILLION)),
    ]


def run_all(sizes: Sizes, *, progress: Callable[[str], None]) -> list[w.Result]:
    """``sizes.runs`` rounds of every case, in turn; the merged figures and ratios."""
    found: list[w.Result] = []
    with servers(fresh=sizes.fresh_server) as lakepubsub_server:
        for i in range(sizes.runs):
            round_results: list[w.Result] = []
            for case in CASES:
                progress(f"{case.name} (run {i + 1}/{sizes.runs})")
                with lakepubsub_server() as server:
                    round_results += run_case(server, case, case.backlog(sizes.backlog))
            found += [*round_results, *ratios(round_results)]
    return w.merge_runs(found)


def cases_table(results: Sequence[w.Result]) -> str:
    by_key = {(r.case, r.metric): r for r in results}
    header = ["subscription", "delivered msgs", "drain time, s", "msgs/s delivered"]
    header += ["server CPU s per 1M delivered", "Delta commits per delivered msg"]
    rows = []
    for case in CASES:
        # Every run delivers the same count (or fails): one number.
        cells = [out.fmt(by_key[case.name, DELIVERED].median)]
        metrics = (DRAIN_S, THROUGHPUT, SERVER_CPU_PER_MILLION, COMMITS_PER_MESSAGE)
        cells += [out.cell(by_key.get((case.name, metric))) for metric in metrics]
        rows.append((case.name, *cells))
    return "\n".join(out.table(header, rows))


RATIO_ROWS = (
    out.Target(
        "exactly-once throughput / plain's", RATIOS, EXACTLY_ONCE_RATIO,
        bound=EXACTLY_ONCE_MIN_RATIO,
    ),
    out.Target(
        "filter: time per delivered message / plain's", RATIOS, FILTER_COST_RATIO,
        bound=FILTER_MAX_COST_RATIO, at_least=False,
    ),
    out.Target(
        "exactly-once: server CPU per delivered message / plain's", RATIOS,
        EXACTLY_ONCE_CPU_RATIO,
    ),
    out.Target("filter: server CPU per delivered message / plain's", RATIOS, FILTER_CPU_RATIO),
)  # fmt: skip


def targets_table(results: Sequence[w.Result]) -> str:
    by_key = {(r.case, r.metric): r for r in results}
    rows = [(row.label, *row.cells(by_key[row.case, row.metric])) for row in RATIO_ROWS]
    header = ["ratio (within a round)", "median [min-max]", "target", "met"]
    return "\n".join(out.table(header, rows, centred=(3,)))


def report(
    results: Sequence[w.Result],
    sizes: Sizes,
    *,
    command: str,
    elapsed_s: float,
    load_before: tuple[float, float, float],
    load_after: tuple[float, float, float],
) -> str:
    server = "a fresh server and lake for every run" if sizes.fresh_server else "one server"
    return "\n".join(
        [
            "# Delivery semantics: plain, exactly-once and filtered pull + ack",
            "",
            f"Written {out.now()} by `{command}` in {elapsed_s / 60:.1f} min.",
            "",
            "## Machine",
            "",
            *out.machine_lines(
                load_before,
                load_after,
                stores="lakes",
                note="Server and clients share the cores.",
                software=out.software("deltalake", "pyarrow", "uvicorn", "httpx"),
            ),
            "",
            "## Workload",
            "",
            f"- Backlog: {sizes.backlog:,} messages of {w.MESSAGE_BYTES:,} bytes per run "
            f"({sizes.backlog * BUCKETS:,} for the filter, so that every case delivers "
            f"{sizes.backlog:,}), published first (untimed) in batches of "
            f"{lps.PREFILL_BATCH:,}; message i has attribute `{BUCKET_ATTRIBUTE}` = "
            f"str(i % {BUCKETS}).",
            f"- Drain: {CONSUMERS} consumer processes, each pulling up to "
            f"{MAX_MESSAGES_PER_PULL:,} (long poll) and acknowledging every pull before the "
            "next, until every expected message is acknowledged; timed from their common "
            "start to the last acknowledgement.",
            f"- Subscriptions: `{PLAIN}`; `{EXACTLY_ONCE}` (`enableExactlyOnceDelivery: true`); "
            f"`{FILTERED}` (`filter: {FILTER}`: one message in {BUCKETS} matches).",
            f"- {sizes.runs} run(s) of each case, round-robin, on {server}; a figure is the "
            "median [min-max] of the runs; a ratio is taken within each round, then the median.",
            *(_QUICK_NOTE if sizes.quick else ()),
            "",
            "## Results",
            "",
            cases_table(results),
            "",
            "Throughput and costs are per **delivered** message. The filtered subscription "
            "still reads every message of the backlog from the lake (the filter runs on the "
            "server over the scanned rows; filtered-out messages count as acknowledged "
            f"without a delivery), so its cost per delivered message includes reading "
            f"{BUCKETS - 1} non-matching messages for every one delivered.",
            "",
            "## Targets",
            "",
            targets_table(results),
            "",
            "`filter: time per delivered message / plain's` is (filtered drain time / "
            "matching messages delivered) / (plain drain time / messages delivered).",
            "",
        ]
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = out.parser(
        "Pull + ack throughput of plain, exactly-once and filtered subscriptions.",
        quick="tiny backlog, one run, one server",
        runs=True,
    )
    args = parser.parse_args(argv)
    sizes = QUICK if args.quick else FULL
    if args.runs is not None:
        sizes = dataclasses.replace(sizes, runs=args.runs)
    started = time.monotonic()
    load_before = os.getloadavg()
    results = run_all(sizes, progress=out.progress(started))
    text = report(
        results,
        sizes,
        command=out.command("semantics", argv),
        elapsed_s=time.monotonic() - started,
        load_before=load_before,
        load_after=os.getloadavg(),
    )
    out.write(args.out, f"semantics{'-quick' if args.quick else ''}.md", text, echo=False)
    print(f"{cases_table(results)}\n\n{targets_table(results)}")
