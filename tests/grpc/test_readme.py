"""The README's quickstart with Google's client, run as written against a real server."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from grpckit import Serve

README = Path(__file__).parents[2] / "README.md"


def test_quickstart_python_block(emulator: Serve, tmp_path: Path) -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    quickstart = next(b for b in blocks if "PUBSUB_EMULATOR_HOST" in b)
    script = tmp_path / "quickstart.py"
    script.write_text(quickstart.replace("127.0.0.1:8085", emulator.host))
    done = subprocess.run(
        [sys.executable, str(script)], check=False, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    # Callbacks run on several threads, so their printed lines may interleave.
    assert done.stdout.count("b'click'") == 2
    assert "/home" in done.stdout
    assert "/cart" in done.stdout
