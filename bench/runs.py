"""What one ``python -m bench`` run measured (``bench/compare.py`` fills it, ``bench/charts.py``
and the report read it)."""

from __future__ import annotations

from dataclasses import dataclass, field

from bench import grpc_bench
from bench import workload as w


@dataclass
class Run:
    """Everything one ``python -m bench`` measured."""

    workload: w.Workload
    s3_workload: w.Workload | None
    # Whether every lakepubsub run had a server of its own (CI runs share one).
    fresh_server: bool
    results: list[w.Result]
    # End-to-end latencies (ms) of the latency case, all runs, per system that gives them.
    latency_samples: dict[str, list[float]]
    elapsed_s: dict[str, float]
    load_before: tuple[float, float, float]
    load_after: tuple[float, float, float]
    # The gRPC cases' sizes, if they ran; whether the REST cases (and their NATS peers) ran.
    grpc_workload: grpc_bench.GrpcWorkload | None = None
    rest: bool = True
    # End-to-end latencies (ms) of the gRPC latency case, all runs, per system.
    grpc_latency_samples: dict[str, list[float]] = field(default_factory=dict)
    # Cases (or whole phases) that failed, with their errors.
    failures: list[grpc_bench.Failure] = field(default_factory=list)
    # True until the last case has run: a report written meanwhile says it is partial.
    partial: bool = False
