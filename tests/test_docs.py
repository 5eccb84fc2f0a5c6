"""The documents refer only to what the repository holds (issue 15: they cited a
design brief that is not in it)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# A file name a text may cite, such as `docs/spark.md` or bench/README.md.
CITED = re.compile(r"(?<![\w/.-])([\w./-]*[A-Za-z]\w*\.md)\b")
# Reports that the benchmarks write (bench/results/…, *-quick.md): outputs of a command,
# not documents the repository must hold.
GENERATED = re.compile(r"(^bench/results/|-quick\.md$)")


def _tracked() -> list[str]:
    listing = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    )
    return listing.stdout.split()


def _citations(text: str) -> set[str]:
    found = {m.group(1) for m in CITED.finditer(text)}
    return {c for c in found if "://" not in c and not GENERATED.search(c)}


def test_every_cited_markdown_file_exists() -> None:
    tracked = _tracked()
    names = {Path(p).name for p in tracked}
    texts = [p for p in tracked if p.endswith(".md") or p in ("Makefile", "pyproject.toml")]
    missing = []
    for path in texts:
        for cited in _citations((ROOT / path).read_text(errors="replace")):
            here = (ROOT / path).parent / cited
            if (ROOT / cited).exists() or here.exists() or Path(cited).name in names:
                continue
            missing.append(f"{path}: {cited}")
    assert missing == []


def test_the_check_sees_a_missing_file() -> None:
    missing = "NOT_IN_THE_REPOSITORY" + ".md"  # spelled apart, or this file would cite it
    assert _citations(f"as {missing} section 4 says, and `docs/spark.md`") == {
        missing,
        "docs/spark.md",
    }
