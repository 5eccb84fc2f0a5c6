"""Filters Spark pushes down: which ones we take, as Arrow expressions and as file pruning.

A filter is taken only when it names one top-level column of a type whose
comparison semantics Arrow shares with Spark (integers, decimals, strings,
booleans, dates, timestamps). Floats are left to Spark: NaN compares as the
largest value there and as unordered in Arrow. A taken filter is evaluated
exactly on every row read, so Spark never sees it again; the same filter also
prunes whole files using the min/max/null-count statistics of the add actions.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import (
    EqualNullSafe,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    IsNull,
    LessThan,
    LessThanOrEqual,
    Not,
    StringContains,
    StringEndsWith,
    StringStartsWith,
)

_COMPARISONS = (EqualTo, EqualNullSafe, GreaterThan, GreaterThanOrEqual, LessThan, LessThanOrEqual)
_STRING_MATCHES = (StringStartsWith, StringEndsWith, StringContains)
_ORDERED = (GreaterThan, GreaterThanOrEqual, LessThan, LessThanOrEqual)
# Delta writers truncate timestamp statistics to milliseconds, so a file's true
# extremes may lie up to this far outside the recorded ones.
_TIMESTAMP_STATS_SLACK = dt.timedelta(milliseconds=1)


class UnsupportedFilter(Exception):
    """The filter stays with Spark."""


def column_of(flt: Filter) -> str:
    """The single top-level column a filter reads."""
    if isinstance(flt, Not):
        return column_of(flt.child)
    attribute = getattr(flt, "attribute", None)
    if not isinstance(attribute, tuple) or len(attribute) != 1:
        raise UnsupportedFilter("not a top-level column")
    return str(attribute[0])


def _is_orderable(kind: pa.DataType) -> bool:
    return bool(
        pa.types.is_integer(kind)
        or pa.types.is_decimal(kind)
        or pa.types.is_string(kind)
        or pa.types.is_large_string(kind)
        or pa.types.is_date(kind)
        or pa.types.is_timestamp(kind)
    )


def _scalar(value: Any, kind: pa.DataType) -> pa.Scalar:
    if value is None or isinstance(value, list | tuple | dict):
        raise UnsupportedFilter("not a scalar literal")
    if isinstance(value, bool) != pa.types.is_boolean(kind):
        raise UnsupportedFilter("boolean literal against a non-boolean column, or the reverse")
    zoned_value = isinstance(value, dt.datetime) and value.tzinfo is not None
    if pa.types.is_timestamp(kind) and zoned_value != (kind.tz is not None):
        raise UnsupportedFilter("timestamp literal and column disagree on having a zone")
    try:
        return pa.scalar(value, type=kind)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError) as exc:
        raise UnsupportedFilter(str(exc)) from exc


def to_expression(flt: Filter, kind: pa.DataType) -> pc.Expression:
    """The Arrow expression of ``flt`` on a column of Arrow type ``kind``, with SQL null logic.

    Raises ``UnsupportedFilter`` for anything it cannot evaluate exactly as Spark would.
    """
    field = pc.field(column_of(flt))
    if isinstance(flt, IsNull):
        return field.is_null()
    if isinstance(flt, IsNotNull):
        return field.is_valid()
    if isinstance(flt, Not):
        return ~to_expression(flt.child, kind)
    if not (_is_orderable(kind) or pa.types.is_boolean(kind)):
        raise UnsupportedFilter(f"column type {kind}")
    if isinstance(flt, _STRING_MATCHES):
        if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
            raise UnsupportedFilter("string match on a non-string column")
        if not isinstance(flt.value, str):
            raise UnsupportedFilter("string match with a non-string pattern")
        if isinstance(flt, StringStartsWith):
            return pc.starts_with(field, pattern=flt.value)
        if isinstance(flt, StringEndsWith):
            return pc.ends_with(field, pattern=flt.value)
        return pc.match_substring(field, pattern=flt.value)
    if isinstance(flt, In):
        values = [_scalar(v, kind) for v in flt.value]
        if not values:
            raise UnsupportedFilter("empty IN list")
        # is_in alone answers false for a null row; SQL answers null (it matters under NOT).
        value_set = pa.array([v.as_py() for v in values], type=kind)
        return pc.if_else(
            field.is_valid(), pc.is_in(field, value_set=value_set), pa.scalar(None, pa.bool_())
        )
    if isinstance(flt, _ORDERED) and not _is_orderable(kind):
        raise UnsupportedFilter("ordering on a boolean column")
    if isinstance(flt, EqualNullSafe):
        if flt.value is None:
            return field.is_null()
        return pc.coalesce(field == _scalar(flt.value, kind), pa.scalar(False))
    if isinstance(flt, _COMPARISONS):
        literal = _scalar(flt.value, kind)
        if isinstance(flt, EqualTo):
            return field == literal
        if isinstance(flt, GreaterThan):
            return field > literal
        if isinstance(flt, GreaterThanOrEqual):
            return field >= literal
        if isinstance(flt, LessThan):
            return field < literal
        return field <= literal
    raise UnsupportedFilter(type(flt).__name__)


def conjunction(expressions: Sequence[pc.Expression]) -> pc.Expression | None:
    """The AND of ``expressions``; ``None`` when there are none."""
    result: pc.Expression | None = None
    for expression in expressions:
        result = expression if result is None else result & expression
    return result


@dataclass(frozen=True)
class ColumnStats:
    """One file's statistics for one column; ``None`` means not recorded."""

    minimum: Any
    maximum: Any
    null_count: int | None
    num_records: int | None


def may_match(flt: Filter, stats: ColumnStats) -> bool:
    """False only when the statistics prove no row of the file satisfies ``flt``."""
    try:
        return _may_match(flt, stats)
    except TypeError:  # statistics of an unexpected type prune nothing
        return True


def _may_match(flt: Filter, stats: ColumnStats) -> bool:
    all_null = stats.num_records is not None and stats.null_count == stats.num_records
    if isinstance(flt, IsNull) or (isinstance(flt, EqualNullSafe) and flt.value is None):
        return stats.null_count is None or stats.null_count > 0
    if isinstance(flt, IsNotNull):
        return not all_null
    if isinstance(flt, Not):
        child = flt.child
        if isinstance(child, IsNull):
            return not all_null
        if isinstance(child, IsNotNull):
            return stats.null_count is None or stats.null_count > 0
        if isinstance(child, Not):
            return _may_match(child.child, stats)
        # NOT of a filter that is null on a null value is null there too; a
        # null-safe equality is false there, so its negation keeps null rows.
        return isinstance(child, EqualNullSafe) or not all_null
    if all_null:
        return False  # every other filter is null or false on a null value
    low, high = stats.minimum, stats.maximum
    if isinstance(low, dt.datetime):
        low = low - _TIMESTAMP_STATS_SLACK
    if isinstance(high, dt.datetime):
        high = high + _TIMESTAMP_STATS_SLACK
    if isinstance(flt, StringStartsWith):
        if isinstance(low, str) and low[: len(flt.value)] > flt.value:
            return False
        return not (isinstance(high, str) and high < flt.value)
    if isinstance(flt, In):
        return any(_in_range(v, low, high) for v in flt.value)
    if isinstance(flt, EqualTo | EqualNullSafe):
        return _in_range(flt.value, low, high)
    if isinstance(flt, GreaterThan):
        return high is None or high > flt.value
    if isinstance(flt, GreaterThanOrEqual):
        return high is None or high >= flt.value
    if isinstance(flt, LessThan):
        return low is None or low < flt.value
    if isinstance(flt, LessThanOrEqual):
        return low is None or low <= flt.value
    return True


def _in_range(value: Any, low: Any, high: Any) -> bool:
    if value is None:
        return False
    if low is not None and value < low:
        return False
    return not (high is not None and value > high)


# -- filters given as (column, op, value) triples -------------------------------------

TRIPLE_OPS = ("=", "!=", "<", "<=", ">", ">=", "in", "not in", "is null", "is not null")
_TRIPLE_COMPARISONS: dict[str, Callable[[tuple[str, ...], Any], Filter]] = {
    "=": EqualTo,
    "<": LessThan,
    "<=": LessThanOrEqual,
    ">": GreaterThan,
    ">=": GreaterThanOrEqual,
}


def from_triples(triples: Sequence[tuple[str, str, Any]], schema: pa.Schema) -> list[Filter]:
    """Spark filter objects for ``(column, op, value)`` triples, values typed by ``schema``.

    Raises ``UnsupportedFilter`` naming the first triple it cannot evaluate exactly.
    """
    filters: list[Filter] = []
    for column, op, value in triples:
        if column not in schema.names:
            raise UnsupportedFilter(f"filter on unknown column {column!r}")
        kind = schema.field(column).type
        attribute = (column,)
        flt: Filter
        if op == "is null":
            flt = IsNull(attribute)
        elif op == "is not null":
            flt = IsNotNull(attribute)
        elif op in ("in", "not in"):
            if not isinstance(value, list | tuple):
                raise UnsupportedFilter(f"{op} needs a list of values")
            flt = In(attribute, tuple(_typed(v, kind) for v in value))
            flt = Not(flt) if op == "not in" else flt
        elif op == "!=":
            flt = Not(EqualTo(attribute, _typed(value, kind)))
        elif op in _TRIPLE_COMPARISONS:
            flt = _TRIPLE_COMPARISONS[op](attribute, _typed(value, kind))
        else:
            raise UnsupportedFilter(f"unknown operator {op!r}; use one of {', '.join(TRIPLE_OPS)}")
        to_expression(flt, kind)  # refuses what it cannot evaluate exactly
        filters.append(flt)
    return filters


def triple_value_json(value: Any) -> Any:
    """A triple's value as JSON can carry it (times as ISO 8601 text)."""
    if isinstance(value, list | tuple):
        return [triple_value_json(v) for v in value]
    if isinstance(value, dt.date):
        return value.isoformat()
    return value


def _typed(value: Any, kind: pa.DataType) -> Any:
    """A JSON value as the Python value Spark would push for a column of type ``kind``."""
    try:
        if isinstance(value, str) and pa.types.is_timestamp(kind):
            parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
            if kind.tz is not None and parsed.tzinfo is None:
                parsed = parsed.replace(tzinfo=dt.UTC)
            return parsed
        if isinstance(value, str) and pa.types.is_date(kind):
            return dt.date.fromisoformat(value)
    except ValueError as exc:
        raise UnsupportedFilter(f"{value!r} is not a {kind}") from exc
    return value
