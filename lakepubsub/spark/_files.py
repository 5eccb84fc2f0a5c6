"""Data-file I/O on executors and the driver: local paths directly, anything else through delta-rs.

Remote tables go through delta-rs's own object-store file system
(``DeltaStorageHandler``), so the storage options that open a table also read
and write its files: no hadoop-aws, no second credential format.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Iterable, Sequence

import pyarrow.fs as pafs
from deltalake.fs import DeltaStorageHandler

from lakepubsub.spark._options import is_local_path


class TableFiles:
    """The files under one table root, addressed by their decoded relative paths."""

    def __init__(self, root: str, storage_options: dict[str, str] | None) -> None:
        self.root = root.rstrip("/")
        self.local = is_local_path(root)
        self.fs = _filesystem(self.root, tuple(sorted((storage_options or {}).items())))

    def location(self, relative_path: str) -> str:
        """The path to hand ``self.fs`` for a file of the table."""
        if self.local:
            return os.path.join(self.root, relative_path)
        return relative_path

    def open_output(self, relative_path: str) -> pafs.NativeFile:
        location = self.location(relative_path)
        if self.local:
            os.makedirs(os.path.dirname(location), exist_ok=True)
        return self.fs.open_output_stream(location)

    def sizes(self, relative_paths: Sequence[str]) -> list[int | None]:
        """Each file's size, ``None`` for a file that does not exist."""
        infos = self.fs.get_file_info([self.location(p) for p in relative_paths])
        return [i.size if i.type == pafs.FileType.File else None for i in infos]

    def delete(self, relative_paths: Iterable[str]) -> None:
        """Delete files; files already gone are fine."""
        for path in relative_paths:
            with contextlib.suppress(FileNotFoundError):
                self.fs.delete_file(self.location(path))


@functools.lru_cache(maxsize=32)
def _filesystem(root: str, storage_options: tuple[tuple[str, str], ...]) -> pafs.FileSystem:
    # Python workers are reused across tasks; one client per table root saves a
    # connection setup per file.
    if is_local_path(root):
        return pafs.LocalFileSystem()
    return pafs.PyFileSystem(DeltaStorageHandler(root, dict(storage_options) or None))
