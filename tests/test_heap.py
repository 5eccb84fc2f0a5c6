"""A server's GC settings (lakepubsub.gc_tuning), each case in a process of its own:
freezing is process-wide."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from lakepubsub import constants
from lakepubsub.settings import Settings

_PROBE = """
import gc, json, sys, weakref
from lakepubsub import gc_tuning
class Node:
    pass
before = gc.get_threshold()
start_up = [Node() for _ in range(1000)]  # made before settle: frozen
gc_tuning.settle(int(sys.argv[1]))
frozen = gc.get_freeze_count()
# A cycle made afterwards is still garbage the collector finds.
a, b = Node(), Node()
a.other, b.other = b, a
gone = weakref.ref(a)
del a, b
gc.collect()
import pyarrow as pa
pool = pa.default_memory_pool()
held = pool.bytes_allocated()
payload = pa.array([b"x" * 4096])  # allocated from the pool in use
print(json.dumps({"before": before, "after": gc.get_threshold(), "frozen": frozen,
                  "cycle_collected": gone() is None, "start_up_alive": len(start_up),
                  "arrow_pool": pa.default_memory_pool().backend_name,
                  "pool_grew": pool.bytes_allocated() - held}))
"""


def _probe(threshold: int, env: dict[str, str] | None = None) -> dict[str, object]:
    environment = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"}
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, str(threshold)],
        capture_output=True,
        text=True,
        check=True,
        env={**environment, **(env or {})},
    ).stdout
    result: dict[str, object] = json.loads(out)
    return result


def test_settle_freezes_start_up_and_raises_the_young_threshold() -> None:
    result = _probe(50_000)
    before = result["before"]
    assert isinstance(before, list)
    assert result["after"] == [50_000, before[1], before[2]]
    frozen = result["frozen"]
    assert isinstance(frozen, int) and frozen >= 1000  # at least the probe's own objects
    assert result["cycle_collected"] is True
    assert result["start_up_alive"] == 1000


def test_zero_keeps_cpythons_threshold() -> None:
    result = _probe(0)
    assert result["after"] == result["before"]
    assert result["cycle_collected"] is True


def test_threshold_from_the_environment() -> None:
    assert Settings.from_env({}).gc_young_threshold == constants.GC_YOUNG_THRESHOLD
    assert Settings.from_env({"LAKEPUBSUB_GC_YOUNG_THRESHOLD": "0"}).gc_young_threshold == 0


def test_a_server_allocates_arrow_memory_with_jemalloc() -> None:
    # pyarrow's default is mimalloc; a server chooses jemalloc (gc_tuning's docstring).
    result = _probe(0)
    assert result["arrow_pool"] == "jemalloc"
    grew = result["pool_grew"]
    assert isinstance(grew, int) and grew >= 4096


def test_arrows_own_variable_still_chooses() -> None:
    assert _probe(0, {"ARROW_DEFAULT_MEMORY_POOL": "system"})["arrow_pool"] == "system"
