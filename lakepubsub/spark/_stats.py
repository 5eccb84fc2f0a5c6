"""Delta statistics (``numRecords``, ``minValues``, ``maxValues``, ``nullCount``) of a new file.

Readers skip files with these, so every recorded bound must hold: a bound that
cannot be written exactly is widened or left out, never narrowed.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

# Delta's default for delta.dataSkippingNumIndexedCols: statistics for the first 32 columns.
DEFAULT_INDEXED_COLUMNS = 32
# Longer strings keep a prefix as their minimum (a prefix sorts first) and a
# prefix plus the largest code point as their maximum, as delta-spark does.
STRING_PREFIX_CHARS = 32
_MAX_CHAR = "\U0010ffff"


def _has_bounds(kind: pa.DataType) -> bool:
    # Floats are left out (NaN has no agreed order), as are decimals (JSON numbers
    # would round them) and zone-less timestamps (writers disagree on their format).
    return bool(
        pa.types.is_integer(kind)
        or pa.types.is_string(kind)
        or pa.types.is_large_string(kind)
        or pa.types.is_date(kind)
        or (pa.types.is_timestamp(kind) and kind.tz is not None)
    )


def _has_null_count(kind: pa.DataType) -> bool:
    return not pa.types.is_struct(kind)


class FileStats:
    """Statistics of one data file, accumulated batch by batch."""

    def __init__(
        self, schema: pa.Schema, *, indexed_columns: int = DEFAULT_INDEXED_COLUMNS
    ) -> None:
        fields = list(schema) if indexed_columns < 0 else list(schema)[:indexed_columns]
        self._fields = [f for f in fields if _has_null_count(f.type)]
        self.num_records = 0
        self._min: dict[str, Any] = {}
        self._max: dict[str, Any] = {}
        self._nulls: dict[str, int] = {f.name: 0 for f in self._fields}

    def update(self, batch: pa.RecordBatch) -> None:
        self.num_records += batch.num_rows
        for field in self._fields:
            column = batch.column(field.name)
            self._nulls[field.name] += column.null_count
            if not _has_bounds(field.type) or column.null_count == len(column):
                continue
            bounds = pc.min_max(column)
            low, high = bounds["min"].as_py(), bounds["max"].as_py()
            current_low = self._min.get(field.name)
            current_high = self._max.get(field.name)
            self._min[field.name] = low if current_low is None else min(current_low, low)
            self._max[field.name] = high if current_high is None else max(current_high, high)

    def to_json(self) -> str:
        minimum = {k: v for k, v in ((k, _lower(v)) for k, v in self._min.items()) if v is not None}
        maximum = {k: v for k, v in ((k, _upper(v)) for k, v in self._max.items()) if v is not None}
        return json.dumps(
            {
                "numRecords": self.num_records,
                "minValues": minimum,
                "maxValues": maximum,
                "nullCount": self._nulls,
            },
            separators=(",", ":"),
        )


def _lower(value: Any) -> Any:
    if isinstance(value, str):
        return value[:STRING_PREFIX_CHARS]
    if isinstance(value, dt.datetime):
        return _timestamp(value.replace(microsecond=value.microsecond // 1000 * 1000))
    if isinstance(value, dt.date):
        return value.isoformat()
    return value


def _upper(value: Any) -> Any:
    if isinstance(value, str):
        if len(value) <= STRING_PREFIX_CHARS:
            return value
        if value[STRING_PREFIX_CHARS] == _MAX_CHAR:
            return None  # no longer string of this prefix sorts above it
        return value[:STRING_PREFIX_CHARS] + _MAX_CHAR
    if isinstance(value, dt.datetime):
        whole_ms = value.replace(microsecond=value.microsecond // 1000 * 1000)
        if whole_ms != value:
            whole_ms += dt.timedelta(milliseconds=1)
        return _timestamp(whole_ms)
    if isinstance(value, dt.date):
        return value.isoformat()
    return value


def _timestamp(value: dt.datetime) -> str:
    """Delta's statistics format: UTC, millisecond precision."""
    utc = value.astimezone(dt.UTC)
    return utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{utc.microsecond // 1000:03d}Z"
