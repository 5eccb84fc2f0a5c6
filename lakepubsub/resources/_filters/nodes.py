"""The syntax tree of a filter, and its canonical text."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar

# AND and OR take this many operands or more: the canonical text cannot spell fewer.
MIN_OPERANDS = 2
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
_NAMED_ESCAPES = {
    "\\": "\\\\",
    '"': '\\"',
    "\a": "\\a",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "\v": "\\v",
}
_SURROGATES = range(0xD800, 0xE000)
_MAX_HEX2 = 0xFF
_MAX_HEX4 = 0xFFFF


@dataclass(frozen=True, slots=True)
class Has:
    """``attributes:KEY``: the message has the attribute."""

    key: str

    def __str__(self) -> str:
        return f"attributes:{render_key(self.key)}"


@dataclass(frozen=True, slots=True)
class _Comparison:
    key: str
    value: str
    operator: ClassVar[str]

    def __str__(self) -> str:
        return f"attributes.{render_key(self.key)} {self.operator} {quote(self.value)}"


@dataclass(frozen=True, slots=True)
class Equals(_Comparison):
    """``attributes.KEY = "VALUE"``: the attribute is present with exactly this value."""

    operator = "="


@dataclass(frozen=True, slots=True)
class NotEquals(_Comparison):
    """``attributes.KEY != "VALUE"``: the negation of `Equals`, so an absent key matches."""

    operator = "!="


@dataclass(frozen=True, slots=True)
class HasPrefix:
    """``hasPrefix(attributes.KEY, "PREFIX")``: the attribute is present and starts so."""

    key: str
    prefix: str

    def __str__(self) -> str:
        return f"hasPrefix(attributes.{render_key(self.key)}, {quote(self.prefix)})"


@dataclass(frozen=True, slots=True)
class Not:
    """``NOT operand`` (also spelled ``-operand``)."""

    operand: Expression

    def __str__(self) -> str:
        return f"NOT {_render_operand(self.operand)}"


@dataclass(frozen=True, slots=True)
class _Junction:
    operands: tuple[Expression, ...]
    operator: ClassVar[str]

    def __post_init__(self) -> None:
        if not isinstance(self.operands, tuple) or len(self.operands) < MIN_OPERANDS:
            raise ValueError(f"{type(self).__name__} needs a tuple of at least two operands")

    def __str__(self) -> str:
        return f" {self.operator} ".join(_render_operand(operand) for operand in self.operands)


@dataclass(frozen=True, slots=True)
class And(_Junction):
    """``a AND b AND ...``: two or more operands, all of which match."""

    operator = "AND"


@dataclass(frozen=True, slots=True)
class Or(_Junction):
    """``a OR b OR ...``: two or more operands, at least one of which matches."""

    operator = "OR"


Expression = Has | Equals | NotEquals | HasPrefix | Not | And | Or


def _render_operand(expression: Expression) -> str:
    if isinstance(expression, And | Or):
        return f"({expression})"
    return str(expression)


def render_key(key: str) -> str:
    """A key as the filter language spells it: bare when it can be, else a string literal."""
    return key if _BARE_KEY.fullmatch(key) else quote(key)


def quote(text: str) -> str:
    """A double-quoted string literal that the scanner reads back as ``text``."""
    return '"' + "".join(_escape(char) for char in text) + '"'


def _escape(char: str) -> str:
    named = _NAMED_ESCAPES.get(char)
    if named is not None:
        return named
    # Lone surrogates cannot be written as escapes (they are not Unicode scalar values),
    # so they pass through raw, which the scanner accepts.
    if char.isprintable() or ord(char) in _SURROGATES:
        return char
    code = ord(char)
    if code <= _MAX_HEX2:
        return f"\\x{code:02X}"
    if code <= _MAX_HEX4:
        return f"\\u{code:04X}"
    return f"\\U{code:08X}"
