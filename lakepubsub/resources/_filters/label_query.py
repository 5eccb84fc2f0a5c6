"""Parser for the early Pub/Sub design's label queries, translated into filter expressions.

Seed 000 names the language (``query``: "a valid label query expression", syntax in
``label_query.proto``) but does not include that file. The clients of that API wrote queries
like ``cloud.googleapis.com/project in (/projects/my-project)``: a label key, ``in``, and a
parenthesised list of values. This module accepts that form plus the obvious neighbours::

    query  = [ clause { "AND" clause } ]
    clause = { "NOT" } key [ "in" "(" value { "," value } ")" | ( "=" | "!=" ) value ]
    key    = 1*( ALPHA | DIGIT | "-" | "_" | "." | "/" ) | string
    value  = 1*( any character but whitespace and , ( ) = ! " ' ) | string

A bare key means "has the label". Labels are message attributes, so ``k in (a, b)`` becomes
``attributes."k" = "a" OR attributes."k" = "b"`` and the rest maps one to one.
"""

from __future__ import annotations

from lakepubsub.resources._filters.nodes import And, Equals, Expression, Has, Not, NotEquals, Or
from lakepubsub.resources._filters.parser import MAX_NESTING
from lakepubsub.resources._filters.scanner import QUOTES, WHITESPACE, Scanner

_KEY_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_./")
_VALUE_STOP = WHITESPACE | QUOTES | frozenset(",()=!")


def parse(text: str) -> Expression | None:
    """The expression ``text`` translates to, or None when it is empty or only whitespace."""
    scanner = Scanner(text, "label query")
    scanner.skip_whitespace()
    if scanner.at_end():
        return None
    clauses = [_clause(scanner)]
    while True:
        scanner.skip_whitespace()
        if scanner.at_end():
            break
        if not scanner.take_word("AND"):
            raise scanner.error("'AND' or the end of the label query")
        clauses.append(_clause(scanner))
    return clauses[0] if len(clauses) == 1 else And(tuple(clauses))


def _clause(scanner: Scanner) -> Expression:
    negations = 0
    while True:
        scanner.skip_whitespace()
        if not scanner.take_word("NOT"):
            break
        negations += 1
        if negations > MAX_NESTING:
            raise scanner.fail(f"more than {MAX_NESTING} NOTs in a row")
    expression = _atom(scanner)
    for _ in range(negations):
        expression = Not(expression)
    return expression


def _atom(scanner: Scanner) -> Expression:
    key = _key(scanner)
    scanner.skip_whitespace()
    if scanner.take("!="):
        return NotEquals(key, _value(scanner))
    if scanner.take("="):
        return Equals(key, _value(scanner))
    if not scanner.take_word("in"):
        return Has(key)
    scanner.expect("(")
    values = [_value(scanner)]
    while True:
        scanner.skip_whitespace()
        if scanner.take(")"):
            break
        if not scanner.take(","):
            raise scanner.error("',' or ')'")
        values.append(_value(scanner))
    if len(values) == 1:
        return Equals(key, values[0])
    return Or(tuple(Equals(key, value) for value in values))


def _key(scanner: Scanner) -> str:
    return scanner.quoted_or_run(_KEY_CHARS, "a label key such as example.com/device_type")


def _value(scanner: Scanner) -> str:
    return scanner.quoted_or_run(_VALUE_STOP, "a label value", stop=True)
