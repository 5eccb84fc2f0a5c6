"""The lease bookkeeping of a StreamingPull drain, without a door or a client: what one
subscription's dispatcher does per message to lease, acknowledge and store.

    python -m bench leases [--messages 300000] [--base REV] [--rounds 3]

Each cycle acknowledges 1,000 ack ids (parsed from their text as a door receives
them), 100 from each of the ten answers out (the Go client's 10,000 unacked
messages; its acks mix answers), leases 1,000 new messages and defers the plan;
every 70th cycle commits (a drain at 70,000 msgs/s with a 1 s lease flush
window), on a real lease table in a temporary local lake. Prints and writes
``leases.md``: µs per message in all and by step, the minimum of the rounds. With
``--base`` the same loop runs against that revision's library too (a temporary git
worktree), in turn with this working tree's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from lakepubsub._lake import Lake, table_schemas
from lakepubsub.delivery.ackids import split_malformed
from lakepubsub.delivery.lease_table import LeaseTable
from lakepubsub.delivery.leases import initial_rows
from lakepubsub.delivery.planner import Planner, Policy
from lakepubsub.messages import message_ack_ids
from lakepubsub.settings import Settings

BATCH = 1_000
WINDOW = 10
COMMIT_EVERY = 70
TAG = "abcdef01"
NOW_US = 1_700_000_000_000_000
STEPS = ("total", "parse", "ack", "lease", "defer", "commit")


def loop(messages: int) -> dict[str, float]:
    """The loop on the ``lakepubsub`` importable here; µs per message by step."""
    policy = Policy(tag=TAG, ack_deadline_s=60)
    spent = dict.fromkeys(STEPS, 0.0)
    with tempfile.TemporaryDirectory(prefix="bench-leases-") as root:
        lake = Lake(Settings(lake=root))
        lake.create_with(
            lake.leases_uri("s"),
            initial_rows(0, NOW_US),
            configuration=table_schemas.LEASES_PROPERTIES,
        )
        table = LeaseTable(lake, "s")
        out: list[list[str]] = []
        cycles = messages // BATCH
        for cycle in range(cycles):
            planner = Planner(table.state(look=False), policy, NOW_US + cycle)
            acked: list[str] = []
            if len(out) >= WINDOW:  # the client's request, not timed
                share = BATCH // WINDOW
                acked = [a for answer in out for a in answer[:share]]
                out = [answer[share:] for answer in out if len(answer) > share]
            t0 = time.perf_counter()
            if acked:
                _, parsed, malformed = split_malformed(acked)
                t1 = time.perf_counter()
                if malformed:
                    raise AssertionError(f"{len(malformed)} malformed ack ids")
                planner.acknowledge(parsed)
                spent["parse"] += t1 - t0
            t2 = time.perf_counter()
            frontier = planner.cursor.frontier
            offsets = list(range(frontier, frontier + BATCH))
            deliveries = planner.lease_new(offsets, [None] * BATCH)
            planner.advance(frontier + BATCH)
            t3 = time.perf_counter()
            # the ids as a client sends them back (a dispatcher makes no text)
            out.append(message_ack_ids(TAG, offsets, deliveries))
            t4 = time.perf_counter()
            if cycle % COMMIT_EVERY == COMMIT_EVERY - 1:
                table.commit(planner)
                spent["commit"] += time.perf_counter() - t4
            else:
                table.defer(planner)
                spent["defer"] += time.perf_counter() - t4
            spent["ack"] += t2 - t0
            spent["lease"] += t3 - t2
        spent["total"] = sum(spent[step] for step in ("ack", "lease", "defer", "commit"))
    done = cycles * BATCH
    return {step: seconds / done * 1e6 for step, seconds in spent.items()}


def run_in(tree: Path, messages: int) -> dict[str, float]:
    """``loop`` in a child process that imports ``lakepubsub`` from ``tree``."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    loop_of = f"runpy.run_path({__file__!r})['loop']"
    code = f"import json, runpy; print(json.dumps({loop_of}({messages})))"
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tree, env=env, check=True, capture_output=True, text=True
    )
    figures: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return figures


def main(argv: Sequence[str] | None = None) -> None:
    # Here, not at the top: a child runs this file with another revision's tree first
    # on its path, whose bench package may not have these.
    from bench import ab, report  # noqa: PLC0415

    parser = report.parser(__doc__ or "", quick="30,000 messages, one round")
    parser.add_argument("--messages", type=int, default=300_000)
    parser.add_argument("--base", default=None, help="also run this revision, in turn")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    messages, rounds = (30_000, 1) if args.quick else (args.messages, args.rounds)
    runs: dict[str, list[dict[str, float]]] = {}
    with ab.checkout(args.base) as base:
        sides = [("head", ab.REPO)] + ([("base", base)] if args.base else [])
        for _ in range(rounds):
            for side, tree in sides:
                runs.setdefault(side, []).append(run_in(tree, messages))
    rows = [
        [side, *(f"{min(r[step] for r in found):.2f}" for step in STEPS)]
        for side, found in runs.items()
    ]
    about = f"base {args.base}, " if args.base else ""
    lines = [
        *report.header(
            "Lease bookkeeping per message",
            command=report.command("leases", argv),
            about=f"{about}{messages:,} messages, {rounds} rounds",
        ),
        "µs per message, the minimum of the rounds: in all, and the ack's parse, the "
        "ack (parse included), the leases of new messages, deferring, committing.",
        "",
        *report.table(["side", *STEPS], rows),
    ]
    report.write(args.out, "leases.md", lines)
