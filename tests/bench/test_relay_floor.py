"""The in-memory relay under the S3 bench's Go load, at a tiny size: every message
reaches its topic's subscriber once, the figures the report shows are there."""

from __future__ import annotations

from pathlib import Path

from bench import relay_floor


def test_the_relay_delivers_every_message_once_and_is_metered(tmp_path: Path) -> None:
    run = relay_floor.load(topics=3, rate_each=5.0, seconds=2.0)
    assert run.messages == 30
    assert run.published["acked"] == 30 and run.published["failures"] == 0
    assert run.received["distinct"] == 30 and run.received["duplicates"] == 0
    # The e2e figure comes from the attribute the publisher set: attributes went through.
    assert 0 <= run.received["e2e_ms"]["p50"] < 10_000
    assert run.server_cpu_s > 0 and run.wall_s >= 2.0
    relay_floor.write_report([run], command="test", out=tmp_path)
    text = (tmp_path / "relay.md").read_text()
    assert "| 3 topics x 5 msgs/s | 15 |" in text and "30 of 30" in text
