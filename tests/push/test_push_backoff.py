"""The back-off curve and the AIMD window measured at a real endpoint.

Seed 003's first example runs at full scale (a delivery about every 500 ms when
one message in five is nacked); the all-nack case (every 30-60 s) runs on a
clock scaled down 60x, which scales every pause alike (the curve is
``min * 2 ** k``, capped at ``max``). test_push_flow.py checks both at full
scale on a simulated clock; bench/push_bench.py measures them for the report.
"""

from __future__ import annotations

import statistics
import threading
import time

from pushkit import ACK, Delivery, Endpoint, Reply, create_push, intervals, publish
from support import LakeSpec, start_server, stop_server

from lakepubsub.settings.push import MAX_BACKOFF_S, MIN_BACKOFF_S

SCALE = 60.0


def test_one_nack_in_five_means_a_delivery_about_every_500_ms(
    local_lake: LakeSpec, endpoint: Endpoint
) -> None:
    counter = iter(range(10**9))
    lock = threading.Lock()

    def one_in_five(_: Delivery) -> Reply:
        with lock:
            n = next(counter)
        return Reply(500 if n % 5 == 4 else ACK)

    endpoint.behaviour = one_in_five
    server = start_server(local_lake, extra_env={"LAKEPUBSUB_PUSH_REFRESH_S": "0.2"})
    try:
        with server.client() as http:
            create_push(http, "one-in-five", endpoint.url())
            publish(http, 80, "one-in-five-topic")
            time.sleep(18.0)
    finally:
        stop_server(server)
    arrivals = [d.at for d in endpoint.snapshot()]
    steady = list(intervals(arrivals))[-25:]  # after a few seconds of warm-up
    assert len(steady) >= 20
    assert 0.35 <= statistics.mean(steady) <= 0.7, steady
    assert 0.3 <= statistics.median(steady) <= 0.7, steady


def test_all_nacked_backs_off_to_30_60_s_scaled(local_lake: LakeSpec, endpoint: Endpoint) -> None:
    endpoint.behaviour = lambda _: Reply(500)
    env = {
        "LAKEPUBSUB_PUSH_REFRESH_S": "0.2",
        "LAKEPUBSUB_PUSH_MIN_BACKOFF_S": str(MIN_BACKOFF_S / SCALE),
        "LAKEPUBSUB_PUSH_MAX_BACKOFF_S": str(MAX_BACKOFF_S / SCALE),
    }
    server = start_server(local_lake, extra_env=env)
    try:
        with server.client() as http:
            create_push(http, "all-nacked", endpoint.url())
            publish(http, 20, "all-nacked-topic")
            time.sleep(14.0)
    finally:
        stop_server(server)
    gaps = list(intervals([d.at for d in endpoint.snapshot()]))
    ramp = next(i for i, gap in enumerate(gaps) if gap * SCALE >= 30.0)
    assert sum(gaps[:ramp]) * SCALE < 150.0, "at 30 s pauses within 2.5 minutes"
    steady = [gap * SCALE for gap in gaps[ramp + 2 :]]
    assert len(steady) >= 6, gaps
    # 30-60 s, plus the pull and nack commits a real delivery adds (scaled up 60x too).
    assert all(28.0 <= gap <= 66.0 for gap in steady), steady
    assert 36.0 <= statistics.mean(steady) <= 56.0


def test_503_storm_shrinks_the_window_and_nothing_is_lost(
    local_lake: LakeSpec, endpoint: Endpoint
) -> None:
    storm = threading.Event()

    def behaviour(_: Delivery) -> Reply:
        return Reply(503) if storm.is_set() else Reply(ACK, delay_s=0.03)

    endpoint.behaviour = behaviour
    env = {
        "LAKEPUBSUB_PUSH_REFRESH_S": "0.2",
        "LAKEPUBSUB_PUSH_MIN_BACKOFF_S": str(MIN_BACKOFF_S / 10),
        "LAKEPUBSUB_PUSH_MAX_BACKOFF_S": "0.5",
    }
    server = start_server(local_lake, extra_env=env)
    try:
        with server.client() as http:
            create_push(http, "stormy", endpoint.url())
            ids = publish(http, 400, "stormy-topic")
            endpoint.wait_for(lambda ds: len(ds) >= 120, timeout_s=30)
            calm_peak = max(d.concurrent for d in endpoint.snapshot())
            storm.set()
            storm_started = time.monotonic()
            time.sleep(2.5)
            storm.clear()
            storm_ended = time.monotonic()
            endpoint.wait_acked(set(ids), timeout_s=60)
    finally:
        stop_server(server)
    seen = endpoint.snapshot()
    late_storm = [d for d in seen if storm_started + 1.0 <= d.at < storm_ended]
    after = [d for d in seen if d.at >= storm_ended + 3.0]
    assert calm_peak >= 8, "the window grew while the endpoint acked"
    assert late_storm, "the dispatcher kept probing during the storm"
    assert max(d.concurrent for d in late_storm) == 1, "multiplicative decrease to one"
    assert len(late_storm) < 40, "and paused between probes"
    assert not after or max(d.concurrent for d in after) >= 2, "additive increase after"
