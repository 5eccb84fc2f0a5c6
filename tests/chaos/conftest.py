"""Make the repository's ``bench`` package importable from these tests.

pytest puts ``tests/`` (not the repository root) on ``sys.path``, where the
directory ``tests/bench`` would otherwise pass for a namespace package named
``bench``; such a stand-in is dropped so the real package is imported.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
_bench = sys.modules.get("bench")
if _bench is not None and getattr(_bench, "__file__", None) is None:
    for _name in [n for n in sys.modules if n == "bench" or n.startswith("bench.")]:
        del sys.modules[_name]
