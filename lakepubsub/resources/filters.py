r"""Subscription filters: Google Cloud Pub/Sub's filter language over message attributes.

A subscription with a filter receives only the messages whose attributes match it; the others
count as acknowledged. The language, as Pub/Sub documents it:

- ``attributes:KEY`` - the message has the attribute.
- ``attributes.KEY = "VALUE"`` - it has the attribute with exactly this value.
- ``attributes.KEY != "VALUE"`` - the negation of ``=``: a message without the key matches.
- ``hasPrefix(attributes.KEY, "PREFIX")`` - it has the attribute and the value starts so.
- ``NOT x`` or ``-x``, ``x AND y``, ``x OR y``, and parentheses. Operators are uppercase.
  NOT binds tightest; AND and OR may not be mixed without parentheses
  (``a AND (b OR c)``, never ``a AND b OR c``).
- A key with characters other than letters, digits, ``-`` and ``_`` is written as a string
  literal: ``attributes."iana.org/language_tag" = "en"``.
- String literals take double (or single) quotes and C-style escapes: ``\\ \" \n \t``...,
  ``\xHH``, ``\uHHHH``, ``\UHHHHHHHH`` and octal ``\ooo`` (code points, not bytes).
- Keys and values are case-sensitive and compared exactly. The empty filter matches
  everything.

The early Pub/Sub design's label queries (``example.com/device in (mobile, tablet)``) are
translated into the same tree by `parse_label_query`.

`parse_filter` returns an immutable `Filter`; ``str(filter)`` is its canonical text, which
parses back to an equal `Filter`. `Filter.matches` tests one message, `Filter.mask` a whole
Arrow column of attribute maps at once. Invalid text raises `InvalidArgument` naming what was
expected and the character position (counted from 1).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from lakepubsub import errors
from lakepubsub.resources._filters import evaluation, label_query, parser
from lakepubsub.resources._filters.nodes import (
    And,
    Equals,
    Expression,
    Has,
    HasPrefix,
    Not,
    NotEquals,
    Or,
)

__all__ = [
    "And",
    "Equals",
    "Expression",
    "Filter",
    "Has",
    "HasPrefix",
    "Not",
    "NotEquals",
    "Or",
    "parse_filter",
    "parse_label_query",
]


@dataclass(frozen=True)
class Filter:
    """A parsed filter: the root of its syntax tree, or None for the filter matching all."""

    expression: Expression | None = None

    @property
    def matches_all(self) -> bool:
        return self.expression is None

    @cached_property
    def _predicate(self) -> evaluation.Predicate:
        if self.expression is None:
            return lambda attributes: True
        return evaluation.compile_predicate(self.expression)

    def matches(self, attributes: Mapping[str, str]) -> bool:
        """Whether a message with these attributes passes the filter."""
        return self._predicate(attributes)

    def mask(self, attributes: Any) -> Any:
        """``[self.matches(row) for row in attributes]`` as a ``pyarrow.BooleanArray``.

        ``attributes`` is a ``pyarrow`` Array or ChunkedArray of type ``map<string, string>``;
        a null row is a message without attributes. Evaluated with Arrow compute kernels.
        """
        return evaluation.evaluate_mask(self.expression, attributes)

    def __str__(self) -> str:
        return "" if self.expression is None else str(self.expression)


def parse_filter(text: str) -> Filter:
    """Parses a Pub/Sub filter; raises `InvalidArgument` saying what is wrong and where."""
    return Filter(parser.parse(_text(text, "filter")))


def parse_label_query(text: str) -> Filter:
    """Parses a label query of the early Pub/Sub design into the equivalent filter."""
    return Filter(label_query.parse(_text(text, "label query")))


def _text(text: object, what: str) -> str:
    # Filters arrive from JSON bodies, where a number or null is one typo away.
    if not isinstance(text, str):
        raise errors.InvalidArgument(f"a {what} must be a string, not {type(text).__name__}")
    return text
