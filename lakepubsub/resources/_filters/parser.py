"""Recursive-descent parser for Pub/Sub subscription filters.

Grammar (whitespace may separate any two tokens)::

    filter      = [ expression ]
    expression  = term { "AND" term } | term { "OR" term }
    term        = { "NOT" | "-" } ( "(" expression ")" | restriction | has_prefix )
    restriction = "attributes" ( ":" key | "." key ( "=" | "!=" ) string )
    has_prefix  = "hasPrefix" "(" "attributes" "." key "," string ")"
    key         = 1*( ALPHA | DIGIT | "-" | "_" ) | string
    string      = '"' ... '"' | "'" ... "'"     (with escapes)
"""

from __future__ import annotations

from lakepubsub.resources._filters import nodes
from lakepubsub.resources._filters.scanner import QUOTES, Scanner

# Parentheses plus negations may nest this deep. A 256-byte filter never needs more, and the
# bound keeps the parser, evaluator and renderer (all recursive) far from Python's stack limit.
MAX_NESTING = 100

BARE_KEY_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
_OPERATORS = ("AND", "OR")
_TERM_START = "'(', '-', 'NOT', 'attributes' or 'hasPrefix'"


def parse(text: str) -> nodes.Expression | None:
    """The expression in ``text``, or None when it is empty or only whitespace."""
    scanner = Scanner(text, "filter")
    scanner.skip_whitespace()
    if scanner.at_end():
        return None
    expression = _expression(scanner, 0)
    scanner.skip_whitespace()
    if not scanner.at_end():
        if scanner.peek() == ")":
            raise scanner.fail("')' has no matching '('")
        raise scanner.error("'AND', 'OR' or the end of the filter")
    return expression


def _expression(scanner: Scanner, depth: int) -> nodes.Expression:
    operands = [_term(scanner, depth)]
    operator = None
    while True:
        scanner.skip_whitespace()
        start = scanner.pos
        word = scanner.word()
        if word not in _OPERATORS:
            if word != word.upper() and word.upper() in (*_OPERATORS, "NOT"):
                raise scanner.fail(f"operators must be uppercase: write {word.upper()!r}")
            break
        if operator is not None and word != operator:
            raise scanner.fail(
                f"{word} cannot follow {operator} without parentheses; "
                f"group them, e.g. 'a {operator} (b {word} c)'",
                at=start,
            )
        operator = word
        scanner.pos += len(word)
        operands.append(_term(scanner, depth))
    if operator is None:
        return operands[0]
    return nodes.And(tuple(operands)) if operator == "AND" else nodes.Or(tuple(operands))


def _term(scanner: Scanner, depth: int) -> nodes.Expression:
    negations = 0
    while True:
        scanner.skip_whitespace()
        if scanner.take_word("NOT") or scanner.take("-"):
            negations += 1
            depth += 1
            _check_depth(scanner, depth)
        elif scanner.word().upper() == "NOT":
            raise scanner.fail("operators must be uppercase: write 'NOT'")
        else:
            break
    expression = _simple(scanner, depth)
    for _ in range(negations):
        expression = nodes.Not(expression)
    return expression


def _simple(scanner: Scanner, depth: int) -> nodes.Expression:
    start = scanner.pos
    if scanner.take("("):
        _check_depth(scanner, depth + 1, at=start)
        inner = _expression(scanner, depth + 1)
        scanner.skip_whitespace()
        if not scanner.take(")"):
            raise scanner.error(f"')' to close the '(' at character {start + 1}")
        return inner
    if scanner.take_word("attributes"):
        return _restriction(scanner)
    if scanner.take_word("hasPrefix"):
        return _has_prefix(scanner)
    if scanner.peek() in QUOTES:
        raise scanner.fail(
            "a comparison must begin with an attribute key, "
            'as in attributes.KEY = "VALUE" or attributes:KEY'
        )
    word = scanner.word()
    for name in ("attributes", "hasPrefix"):
        if word != name and word.lower() == name.lower():
            raise scanner.fail(f"names are case-sensitive: write {name!r}")
    raise scanner.error(_TERM_START)


def _restriction(scanner: Scanner) -> nodes.Expression:
    scanner.skip_whitespace()
    if scanner.take(":"):
        return nodes.Has(_key(scanner))
    if not scanner.take("."):
        raise scanner.error("':' or '.' after 'attributes'")
    key = _key(scanner)
    scanner.skip_whitespace()
    if scanner.take("!="):
        return nodes.NotEquals(key, _string(scanner))
    if scanner.take("="):
        return nodes.Equals(key, _string(scanner))
    raise scanner.error("'=' or '!='")


def _has_prefix(scanner: Scanner) -> nodes.Expression:
    scanner.expect("(")
    scanner.skip_whitespace()
    if not scanner.take_word("attributes"):
        raise scanner.error("'attributes' as the first argument of hasPrefix")
    scanner.expect(".")
    key = _key(scanner)
    scanner.expect(",")
    prefix = _string(scanner)
    scanner.expect(")")
    return nodes.HasPrefix(key, prefix)


def _key(scanner: Scanner) -> str:
    scanner.skip_whitespace()
    if scanner.peek() == "\\":
        raise scanner.fail("escape sequences are only allowed inside a quoted string")
    return scanner.quoted_or_run(
        BARE_KEY_CHARS, "an attribute key (letters, digits, '-' and '_', or a quoted string)"
    )


def _string(scanner: Scanner) -> str:
    quoted = scanner.quoted()
    if quoted is not None:
        return quoted
    raise scanner.error('a string literal such as "value"')


def _check_depth(scanner: Scanner, depth: int, *, at: int | None = None) -> None:
    if depth > MAX_NESTING:
        raise scanner.fail(f"the filter nests more than {MAX_NESTING} levels deep", at=at)
