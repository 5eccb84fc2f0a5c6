"""Large data files of a local lake written past the page cache (``O_DIRECT``).

Written through the page cache, a new file's bytes are first copied into freshly
allocated cache pages. On the project's machines (2-core VMs whose free memory
goes back to the host) that copy was the largest single cost of a batched
publish: 2.2 µs of kernel time per 1 KiB message, 44 % of the committing
thread's CPU (``perf``), and 1.4-1.85 s of CPU per GiB written to a new file
against 0.06 s written with ``O_DIRECT``. The process does not need the file in
the page cache either: the rows it just committed are kept decoded
(``publish/decoded.py``), and other readers come much later. Databases write
their immutable files this way for the same reason (RocksDB's flush and
compaction outputs). Python's ``os`` module opens, writes and switches the flag;
nothing else is needed.

A file is written in two parts: its largest multiple of 4 KiB directly, from
memory aligned to 4 KiB (the bytes where they lie when they are aligned, else
copied once into an aligned Arrow buffer), then the rest through the page
cache, which starts a fresh page, so no page is read back from the disk.
Smaller files are written as before: they fit in a few pages and are read back
at once (a commit's own log entry, a one-message data file).

The process reads a large file back the same way (``read``, from
``LogView.parquet``): a read through the page cache of a file that is not in it
fills fresh cache pages too, 2.5 s of CPU a GiB here against 0.2 s read
directly into an Arrow buffer. A file still in the cache (written by another
program a moment before) costs 0.1 s a GiB more to read this way.

A filesystem that refuses ``O_DIRECT`` (tmpfs, some network and FUSE ones)
answers EINVAL; the file is then written the usual way and its directory is not
tried again. Where the platform has no ``O_DIRECT`` (macOS), it is never tried.
Durability is unchanged: neither way syncs, and either way a file is named by a
commit only after it is written whole.
"""

from __future__ import annotations

import errno
import fcntl
import os

import pyarrow as pa

# Alignment of memory, file offset and length for O_DIRECT: the largest logical
# block size in common use, so it suits 512-byte and 4 KiB devices alike.
BLOCK = 4096
# Files smaller than this are written through the page cache.
DIRECT_MIN_BYTES = 256 * 1024

_FLAG: int = getattr(os, "O_DIRECT", 0)
# Directories whose filesystem refused O_DIRECT.
_refused: set[str] = set()


def write(path: str, data: bytes | pa.Buffer) -> bool:
    """Write ``data`` as the new file ``path`` past the page cache; False when it was
    not (too small, or the filesystem refuses): the caller writes it as usual,
    over whatever was started. Other errors (a missing directory) are raised."""
    view = memoryview(data).cast("B")
    direct = len(view) - len(view) % BLOCK
    directory = os.path.dirname(path)
    if not _FLAG or direct < DIRECT_MIN_BYTES or directory in _refused:
        return False
    aligned = _aligned(data, view, direct)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | _FLAG, 0o666)
    except OSError as exc:
        return _refuse(directory, exc)
    try:
        try:
            _write_all(fd, aligned)
        except OSError as exc:
            return _refuse(directory, exc)
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~_FLAG)
        _write_all(fd, view[direct:])
    finally:
        os.close(fd)
    return True


def read(path: str) -> pa.Buffer | None:
    """The whole file ``path`` read past the page cache, when it is large enough to
    have been written that way (None: read it as usual). FileNotFoundError when
    there is none."""
    directory = os.path.dirname(path)
    if not _FLAG or directory in _refused:
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | _FLAG)
    except OSError as exc:
        _refuse(directory, exc)
        return None
    try:
        size = os.fstat(fd).st_size
        if size < DIRECT_MIN_BYTES:
            return None
        into = aligned_memory(size + -size % BLOCK)  # reads past the end stop at it
        done = 0
        while done < size:
            try:
                got = os.readv(fd, [into[done:]])
            except OSError as exc:
                _refuse(directory, exc)
                return None
            if not got:
                break
            done += got
        return pa.py_buffer(into).slice(0, done)
    finally:
        os.close(fd)


def aligned_memory(size: int) -> memoryview:
    """``size`` writable bytes of Arrow memory starting at a multiple of ``BLOCK``
    (``pa.py_buffer`` makes them an Arrow buffer that keeps them alive)."""
    spare = pa.allocate_buffer(size + BLOCK)
    start = -spare.address % BLOCK
    return memoryview(spare).cast("B")[start : start + size]


def _aligned(data: bytes | pa.Buffer, view: memoryview, size: int) -> memoryview:
    """The first ``size`` bytes of ``data`` in memory aligned to ``BLOCK``."""
    buffer = data if isinstance(data, pa.Buffer) else pa.py_buffer(data)
    if buffer.address % BLOCK == 0:
        return view[:size]
    aligned = aligned_memory(size)
    aligned[:] = view[:size]
    return aligned


def _write_all(fd: int, view: memoryview) -> None:
    while view:
        view = view[os.write(fd, view) :]


def _refuse(directory: str, exc: OSError) -> bool:
    if exc.errno != errno.EINVAL:
        raise exc
    _refused.add(directory)
    return False
