"""The side-by-side report's charts: throughput per case, and latency."""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench import workload as w
from bench.report import fmt

if TYPE_CHECKING:
    from bench.runs import Run

NATS, LPS, LPS_S3 = "nats-jetstream", "lakepubsub", "lakepubsub-s3"
LABELS = {NATS: "NATS JetStream", LPS: "lakepubsub (local lake)", LPS_S3: "lakepubsub (moto S3)"}
COLORS = {NATS: "#4c72b0", LPS: "#dd8452", LPS_S3: "#55a868"}
CHART_DPI = 110


def _pyplot() -> Any:
    """pyplot drawing to files, imported on the first chart: matplotlib is a dev extra, slow to
    import, that only the charts need."""
    importlib.import_module("matplotlib").use("Agg")
    return importlib.import_module("matplotlib.pyplot")


def _cdf(ax: Any, samples: Sequence[float], **style: Any) -> None:
    """The samples' cumulative distribution as a step line."""
    ordered = sorted(samples)
    ax.step(ordered, [(i + 1) / len(ordered) for i in range(len(ordered))], where="post", **style)


def throughput_chart(results: Sequence[w.Result], path: Path) -> None:
    """Grouped horizontal bars: throughput per case and system, min-max whiskers."""
    plt = _pyplot()
    found = [r for r in results if r.metric == w.THROUGHPUT]
    cases = list(dict.fromkeys(r.case for r in found))
    systems = [s for s in LABELS if any(r.system == s for r in found)]
    by_key = {(r.system, r.case): r for r in found}
    height = 0.8 / len(systems)
    fig, ax = plt.subplots(figsize=(10, 0.5 + 0.55 * len(cases) * len(systems)))
    for k, system in enumerate(systems):
        rows = [(i, by_key[system, c]) for i, c in enumerate(cases) if (system, c) in by_key]
        ys = [i + (k - (len(systems) - 1) / 2) * height for i, _ in rows]
        medians = [r.median for _, r in rows]
        errors = [[r.median - r.min for _, r in rows], [r.max - r.median for _, r in rows]]
        ax.barh(ys, medians, height, xerr=errors, label=LABELS[system], color=COLORS[system])
        for y, value in zip(ys, medians, strict=True):
            ax.annotate(
                f" {fmt(value)}", (value, y), va="center", fontsize=7, annotation_clip=False
            )
    ax.set_yticks(range(len(cases)), cases, fontsize=8)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("messages per second (log scale; median, whiskers min-max)")
    ax.set_title("Throughput, 1 KiB messages")
    ax.legend(loc="lower right", fontsize=8)
    ax.grid(axis="x", which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=CHART_DPI)
    plt.close(fig)


def latency_chart(done: Run, path: Path) -> None:
    """End-to-end latency CDF (latency case), and publish round-trip p50/p99 per publish case."""
    plt = _pyplot()
    results = done.results
    fig, (cdf, batches) = plt.subplots(1, 2, figsize=(13, 5.5))
    latency_case = done.workload.latency[0].name
    for system, label in LABELS.items():
        if samples := done.latency_samples.get(system):
            _cdf(cdf, samples, label=label, color=COLORS[system])
            continue
        # A system that reports only percentiles shows them as points.
        points = [
            (r.median, fraction)
            for metric, fraction in (
                (w.LATENCY_P50, 0.5),
                (w.LATENCY_P99, 0.99),
                (w.LATENCY_MAX, 1.0),
            )
            for r in results
            if r.system == system and r.metric == metric and r.case == latency_case
        ]
        if points:
            xs, ys = zip(*points, strict=True)
            cdf.plot(xs, ys, "o", label=f"{label} (p50, p99, max only)", color=COLORS[system])
    for system, samples in done.grpc_latency_samples.items():
        # The gRPC latency case (Go clients on both sides), dashed.
        rate = done.grpc_workload.latency_rate_per_s if done.grpc_workload else 0
        over = " over gRPC" if system == LPS else ""
        label = f"{LABELS[system]}, Go client{over} ({rate:,} msgs/s)"
        _cdf(cdf, samples, linestyle="--", label=label, color=COLORS[system])
    cdf.set_xscale("log")
    cdf.set_xlabel("publish → receive latency, ms (log scale)")
    cdf.set_ylabel("fraction of messages")
    rate = done.workload.latency[0].offered_rate_per_s
    cdf.set_title(f"End-to-end latency at {rate:,} msgs/s offered ({latency_case}), all runs")
    cdf.grid(which="both", alpha=0.3)
    cdf.legend(fontsize=8, loc="lower right")

    publish = [c.name for c in done.workload.publish]
    systems = [s for s in (NATS, LPS) if any(r.system == s for r in results)]
    by_key = {(r.system, r.case, r.metric): r for r in results}
    width = 0.8 / (2 * len(systems))
    for k, (system, metric) in enumerate(
        (s, m) for s in systems for m in (w.BATCH_LATENCY_P50, w.BATCH_LATENCY_P99)
    ):
        offsets = [i + (k - (2 * len(systems) - 1) / 2) * width for i in range(len(publish))]
        values = [
            by_key[system, c, metric].median if (system, c, metric) in by_key else 0.0
            for c in publish
        ]
        hatch = "//" if metric == w.BATCH_LATENCY_P99 else ""
        label = f"{LABELS[system]} {metric.removeprefix('batch_latency_')}"
        batches.bar(
            offsets,
            values,
            width,
            label=label,
            color=COLORS[system],
            hatch=hatch,
            edgecolor="white",
        )
    batches.set_xticks(
        range(len(publish)), [c.removeprefix("publish ") for c in publish], rotation=20, fontsize=8
    )
    batches.set_yscale("log")
    batches.set_ylabel("publish request round trip, ms (log scale; medians of runs)")
    batches.set_title("Publish round-trip latency p50 / p99 per publish case")
    batches.grid(axis="y", which="both", alpha=0.3)
    batches.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=CHART_DPI)
    plt.close(fig)
