"""Where each benchmark run keeps its store, and how it is cleaned up.

A run's directory (a lake, a JetStream store) is emptied as soon as the run
ends: every file is truncated to nothing, which gives its disk space back. The
files themselves, and their directories, are removed only when the benchmark
process exits.

Why not delete at once: on an ext4 filesystem without a journal (the machines
these figures come from), the kernel will not reuse an inode freed in the last
30 seconds, or 5.5 minutes while its inode table block is still dirty
(``recently_deleted`` in ``fs/ext4/ialloc.c``), and it walks past every such
inode for each new file. Measured here: creating a file took 12-24 µs, and
755 µs half a minute after 20,000 files were deleted. A run that deleted its
lake would so slow down every file the next runs create, whichever system they
measure. Truncating frees blocks, not inodes, and leaves inode allocation alone.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import tempfile
from pathlib import Path

_LEFT: list[Path] = []


def directory(prefix: str) -> Path:
    """A new empty directory for one run."""
    return Path(tempfile.mkdtemp(prefix=prefix))


def release(path: Path) -> None:
    """The run is over: free the directory's space now, remove it at exit."""
    for root, _, files in os.walk(path):
        for name in files:
            file = os.path.join(root, name)
            if os.path.islink(file):  # never truncate what a link points to
                continue
            with contextlib.suppress(OSError):  # gone already, or not a regular file
                os.truncate(file, 0)
    _LEFT.append(path)


@atexit.register
def remove_released() -> None:
    """Remove every released directory (at exit, or by a caller that is done)."""
    while _LEFT:
        shutil.rmtree(_LEFT.pop(), ignore_errors=True)
