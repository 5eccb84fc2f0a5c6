"""The syntax tree of a filter, and its canonical text."""

from __future__ import annotations

import re
from dataclasses import dataclass

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
class Equals:
    """``attributes.KEY = "VALUE"``: the attribute is present with exactly this value."""

    key: str
    value: str

    def __str__(self) -> str:
        return f"attributes.{render_key(self.key)} = {quote(self.value)}"


@dataclass(frozen=True, slots=True)
class NotEquals:
    """``attributes.KEY != "VALUE"``: the negation of `Equals`, so an absent key matches."""

    key: str
    value: str

    def __str__(self) -> str:
        return f"attributes.{render_key(self.key)} != {quote(self.value)}"


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
class And:
    """``a AND b AND ...``: two or more operands, all of which match."""

    operands: tuple[Expression, ...]

    def __post_init__(self) -> None:
        _check_operands(self.operands, "And")

    def __str__(self) -> str:
        return " AND ".join(_render_operand(operand) for operand in self.operands)


@dataclass(frozen=True, slots=True)
class Or:
    """``a OR b OR ...``: two or more operands, at least one of which matches."""

    operands: tuple[Expression, ...]

    def __post_init__(self) -> None:
        _check_operands(self.operands, "Or")

    def __str__(self) -> str:
        return " OR ".join(_render_operand(operand) for operand in self.operands)


Expression = Has | Equals | NotEquals | HasPrefix | Not | And | Or


def _check_operands(operands: tuple[Expression, ...], name: str) -> None:
    if not isinstance(operands, tuple) or len(operands) < MIN_OPERANDS:
        raise ValueError(f"{name} needs a tuple of at least two operands")


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
