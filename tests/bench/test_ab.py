"""``python -m bench ab``: two revisions' servers in turn, one report."""

from __future__ import annotations

from pathlib import Path

from bench import ab


def test_two_revisions_run_in_turn_into_one_report(tmp_path: Path) -> None:
    ab.main(["--base", "HEAD", "--quick", "--publish", "1", "--out", str(tmp_path), "--name", "t"])
    text = (tmp_path / "ab-t.md").read_text()
    rows = {line.split(" | ")[0].lstrip("| "): line for line in text.splitlines()}
    for run in ("base", "head", "median, base", "median, head", "head ÷ base"):
        assert run in rows, text
    cells = rows["base"].strip("| ").split(" | ")[1:]
    # Drain (2), publish (2), latency (4).
    assert len(cells) == 8 and all(float(c.replace(",", "")) > 0 for c in cells), text
    assert "base HEAD" in text
