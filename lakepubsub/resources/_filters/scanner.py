"""Character-level reading shared by both parsers: whitespace, words, string literals, errors.

Positions in error messages count characters from 1.
"""

from __future__ import annotations

from lakepubsub import errors

WHITESPACE = frozenset(" \t\n\r\f\v")
WORD_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")
QUOTES = frozenset("\"'")
HEX_DIGITS = frozenset("0123456789abcdefABCDEF")
OCTAL_DIGITS = frozenset("01234567")

_SIMPLE_ESCAPES = {
    "a": "\a",
    "b": "\b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "v": "\v",
    "\\": "\\",
    "?": "?",
    "`": "`",
    '"': '"',
    "'": "'",
}
# Escape letter -> number of hex digits that follow it.
_HEX_ESCAPES = {"x": 2, "X": 2, "u": 4, "U": 8}
_OCTAL_ESCAPE_DIGITS = 3
_FIRST_OCTAL_DIGITS = frozenset("0123")
_SURROGATES = range(0xD800, 0xE000)
_MAX_CODE_POINT = 0x10FFFF
# How much of the offending text an error message quotes.
_MAX_FOUND_CHARS = 20


class Scanner:
    """A cursor over the text being parsed; ``what`` names the language in error messages."""

    def __init__(self, text: str, what: str) -> None:
        self.text = text
        self.what = what
        self.pos = 0

    def skip_whitespace(self) -> None:
        text, pos = self.text, self.pos
        while pos < len(text) and text[pos] in WHITESPACE:
            pos += 1
        self.pos = pos

    def at_end(self) -> bool:
        return self.pos >= len(self.text)

    def peek(self) -> str:
        """The next character, or "" at the end."""
        return self.text[self.pos : self.pos + 1]

    def take(self, literal: str) -> bool:
        if self.text.startswith(literal, self.pos):
            self.pos += len(literal)
            return True
        return False

    def word(self) -> str:
        """The run of letters, digits and underscores at the cursor, without consuming it."""
        text, end = self.text, self.pos
        while end < len(text) and text[end] in WORD_CHARS:
            end += 1
        return text[self.pos : end]

    def take_word(self, word: str) -> bool:
        if self.word() == word:
            self.pos += len(word)
            return True
        return False

    def take_run(self, chars: frozenset[str], *, stop: bool = False) -> str:
        """The run of characters in ``chars`` at the cursor (with ``stop``: of characters
        not in it), consumed."""
        text, start = self.text, self.pos
        end = start
        while end < len(text) and (text[end] in chars) != stop:
            end += 1
        self.pos = end
        return text[start:end]

    def expect(self, literal: str) -> None:
        self.skip_whitespace()
        if not self.take(literal):
            raise self.error(f"'{literal}'")

    def found(self) -> str:
        """How the error messages describe what is at the cursor."""
        if self.at_end():
            return f"end of {self.what}"
        word = self.word()
        if word:
            shown = word[:_MAX_FOUND_CHARS] + ("..." if len(word) > _MAX_FOUND_CHARS else "")
            return repr(shown)
        return repr(self.peek())

    def error(self, expected: str, *, at: int | None = None) -> errors.InvalidArgument:
        """``expected X, found Y`` at the cursor (or at ``at``)."""
        if at is not None:
            self.pos = at
        return self.fail(f"expected {expected}, found {self.found()}")

    def fail(self, message: str, *, at: int | None = None) -> errors.InvalidArgument:
        position = (self.pos if at is None else at) + 1
        return errors.InvalidArgument(f"Invalid {self.what} at character {position}: {message}")

    def quoted(self) -> str | None:
        """The quoted string at the next token, decoded; None if none starts there."""
        self.skip_whitespace()
        return self.string_literal() if self.peek() in QUOTES else None

    def quoted_or_run(self, chars: frozenset[str], expected: str, *, stop: bool = False) -> str:
        """The next token, a quoted string (decoded) or a run as `take_run` reads it;
        ``expected X, found Y`` if neither starts there."""
        quoted = self.quoted()
        if quoted is not None:
            return quoted
        run = self.take_run(chars, stop=stop)
        if not run:
            raise self.error(expected)
        return run

    def string_literal(self) -> str:
        """Reads a quoted string at the cursor and returns its decoded value."""
        text, start = self.text, self.pos
        quote = text[start]
        parts: list[str] = []
        pos = start + 1
        while True:
            # Copy the plain run up to the next quote or backslash in one slice.
            end = pos
            while end < len(text) and text[end] != quote and text[end] != "\\":
                end += 1
            parts.append(text[pos:end])
            if end >= len(text):
                raise self.fail(f"unterminated string literal (missing {quote})", at=start)
            if text[end] == quote:
                self.pos = end + 1
                return "".join(parts)
            char, pos = self._escape(end)
            parts.append(char)

    def _escape(self, backslash: int) -> tuple[str, int]:
        """Decodes the escape sequence at ``backslash``; returns it and the position after it."""
        text = self.text
        letter = text[backslash + 1 : backslash + 2]
        if letter in _SIMPLE_ESCAPES:
            return _SIMPLE_ESCAPES[letter], backslash + 2
        if letter in _HEX_ESCAPES:
            digits = text[backslash + 2 : backslash + 2 + _HEX_ESCAPES[letter]]
            if len(digits) < _HEX_ESCAPES[letter] or not set(digits) <= HEX_DIGITS:
                raise self.fail(
                    f"escape \\{letter} needs {_HEX_ESCAPES[letter]} hex digits", at=backslash
                )
            return self._code_point(int(digits, 16), backslash), backslash + 2 + len(digits)
        if letter in _FIRST_OCTAL_DIGITS:
            digits = text[backslash + 1 : backslash + 1 + _OCTAL_ESCAPE_DIGITS]
            if len(digits) < _OCTAL_ESCAPE_DIGITS or not set(digits) <= OCTAL_DIGITS:
                raise self.fail(
                    "an octal escape needs 3 octal digits (\\000 to \\377)", at=backslash
                )
            return self._code_point(int(digits, 8), backslash), backslash + 1 + len(digits)
        if not letter:
            raise self.fail("unterminated string literal (it ends in a backslash)", at=backslash)
        raise self.fail(f"unknown escape sequence \\{letter}", at=backslash)

    def _code_point(self, code: int, at: int) -> str:
        if code > _MAX_CODE_POINT or code in _SURROGATES:
            raise self.fail(f"escape for U+{code:04X} is not a Unicode character", at=at)
        return chr(code)
