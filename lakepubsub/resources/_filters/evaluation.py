"""Evaluating an expression: compiled to closures for one message, to Arrow kernels for a column.

Both paths give an attribute map the same meaning: when a key repeats (possible in an Arrow
map, never in Pub/Sub) the last entry wins, as it does in ``dict(pairs)``; a null row is a
message without attributes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import reduce
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from lakepubsub.resources._filters import nodes

Predicate = Callable[[Mapping[str, str]], bool]
_BINARY = 2


def compile_predicate(expression: nodes.Expression) -> Predicate:
    """A function answering whether one message's attributes match ``expression``."""
    match expression:
        case nodes.Has(key):
            return lambda attributes: key in attributes
        case nodes.Equals(key, value):
            return lambda attributes: attributes.get(key) == value
        case nodes.NotEquals(key, value):
            return lambda attributes: attributes.get(key) != value
        case nodes.HasPrefix(key, prefix):

            def has_prefix(attributes: Mapping[str, str]) -> bool:
                value = attributes.get(key)
                return value is not None and value.startswith(prefix)

            return has_prefix
        case nodes.Not(operand):
            inner = compile_predicate(operand)
            return lambda attributes: not inner(attributes)
        case nodes.And(operands):
            return _all([compile_predicate(operand) for operand in operands])
        case nodes.Or(operands):
            return _any([compile_predicate(operand) for operand in operands])
    raise TypeError(f"not a filter expression: {expression!r}")


def _all(predicates: list[Predicate]) -> Predicate:
    # Two operands is the common case; a direct call beats the generator in all().
    if len(predicates) == _BINARY:
        first, second = predicates
        return lambda attributes: first(attributes) and second(attributes)
    return lambda attributes: all(predicate(attributes) for predicate in predicates)


def _any(predicates: list[Predicate]) -> Predicate:
    if len(predicates) == _BINARY:
        first, second = predicates
        return lambda attributes: first(attributes) or second(attributes)
    return lambda attributes: any(predicate(attributes) for predicate in predicates)


def evaluate_mask(expression: nodes.Expression | None, column: Any) -> Any:
    """One boolean per row of a ``map<string, string>`` column (an Array or a ChunkedArray)."""
    if not isinstance(column, pa.Array | pa.ChunkedArray) or not pa.types.is_map(column.type):
        raise TypeError(f"expected a pyarrow map<string, string> column, got {column!r:.80}")
    if expression is None:
        return pa.repeat(True, len(column))
    result = _Column(column).evaluate(expression)
    if isinstance(result, pa.ChunkedArray):
        return result.combine_chunks()
    return result


class _Column:
    """One column under evaluation, with each key's lookup done once however often it is used."""

    def __init__(self, column: Any) -> None:
        self.column = column
        self.key_type = column.type.key_type
        self.values_may_be_null = any(
            chunk.items.null_count for chunk in _chunks(column) if len(chunk)
        )
        self._values: dict[str, Any] = {}
        self._present: dict[str, Any] = {}

    def evaluate(self, expression: nodes.Expression) -> Any:
        match expression:
            case nodes.Has(key):
                return self.present(key)
            case nodes.Equals(key, value):
                return pc.fill_null(pc.equal(self.values(key), value), False)
            case nodes.NotEquals(key, value):
                return pc.invert(self.evaluate(nodes.Equals(key, value)))
            case nodes.HasPrefix(key, prefix):
                return pc.fill_null(pc.starts_with(self.values(key), pattern=prefix), False)
            case nodes.Not(operand):
                return pc.invert(self.evaluate(operand))
            case nodes.And(operands):
                return reduce(pc.and_, [self.evaluate(operand) for operand in operands])
            case nodes.Or(operands):
                return reduce(pc.or_, [self.evaluate(operand) for operand in operands])
        raise TypeError(f"not a filter expression: {expression!r}")

    def values(self, key: str) -> Any:
        """Each row's value for ``key``: null when the row lacks it (or the value is null)."""
        if key not in self._values:
            query = pa.scalar(key, type=self.key_type)
            self._values[key] = pc.map_lookup(self.column, query, "last")
        return self._values[key]

    def present(self, key: str) -> Any:
        if key not in self._present:
            if self.values_may_be_null:
                # A null value still means the key is there; "all" tells the two apart.
                query = pa.scalar(key, type=self.key_type)
                found = pc.map_lookup(self.column, query, "all")
            else:
                found = self.values(key)
            self._present[key] = pc.is_valid(found)
        return self._present[key]


def _chunks(column: Any) -> list[Any]:
    return list(column.chunks) if isinstance(column, pa.ChunkedArray) else [column]
