"""``python -m bench leases``: a drain's lease bookkeeping, per message, by step."""

from __future__ import annotations

from pathlib import Path

from bench import leases_bench


def test_the_report_has_every_step_of_the_loop(tmp_path: Path) -> None:
    leases_bench.main(["--quick", "--out", str(tmp_path)])
    text = (tmp_path / "leases.md").read_text()
    head = next(line for line in text.splitlines() if line.startswith("| head |"))
    cells = [float(c) for c in head.strip("| ").split(" | ")[1:]]
    assert len(cells) == len(leases_bench.STEPS)
    total, *steps = cells
    # the steps are parts of the whole (the parse is part of the ack)
    assert total > 0 and all(s >= 0 for s in steps)
    assert sum(s for name, s in zip(leases_bench.STEPS[1:], steps, strict=True)
               if name != "parse") <= total * 1.05  # fmt: skip
