"""Helpers for the Spark tests: messages rows and tables written with delta-rs.

Test modules import these from here, not from ``conftest`` (a name every test
directory's conftest shares).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

import pyarrow as pa

from lakepubsub._lake.table_schemas import MESSAGES

T0 = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
# Messages per file and files per table: small, but enough files to see pruning.
ROWS_PER_FILE = 20
FILES = 5

MessagesFactory = Callable[..., str]


def message_rows(first_offset: int, count: int) -> pa.Table:
    """``count`` messages from ``first_offset``: one publish every 10 ms, varied nulls."""
    offsets = list(range(first_offset, first_offset + count))
    return pa.table(
        {
            "offset": offsets,
            "message_id": [f"m{o:06d}" for o in offsets],
            "publish_time": [
                T0 + dt.timedelta(milliseconds=10 * o, microseconds=7) for o in offsets
            ],
            "data": [None if o % 7 == 0 else bytes([o % 256]) * 16 for o in offsets],
            "attributes": [
                None if o % 5 == 0 else [("k", f"v{o % 3}"), ("o", str(o))] for o in offsets
            ],
            "ordering_key": [None if o % 2 else f"key{o % 4}" for o in offsets],
            "size": [16 + o % 3 for o in offsets],
        },
        schema=MESSAGES,
    )
