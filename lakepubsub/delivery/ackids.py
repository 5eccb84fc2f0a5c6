"""Ack ids name one delivery: subscription incarnation, message (or event), delivery id.

Delivery ids are unique and increasing within a subscription, so "only the
newest ack id of a message is valid" (exactly-once) is a comparison with the
lease row's ``delivery_id``.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from lakepubsub import errors
from lakepubsub._lake import table_schemas

_TAG_CHARS = 8
_ID = r"([0-9a-f]{8})-([me])([0-9]{1,19})-([0-9]{1,19})"
_PATTERN = re.compile(_ID)
# Many ids at once: one per line, matched by one scan of their joined text.
_LINES = re.compile(f"^{_ID}$", re.MULTILINE)
# Building the tuple directly skips NamedTuple's argument handling.
_new = tuple.__new__
_KIND_LETTER = {table_schemas.KIND_MESSAGE: "m", table_schemas.KIND_EVENT: "e"}
_LETTER_KIND = {v: k for k, v in _KIND_LETTER.items()}


def subscription_tag(subscription_uid: str) -> str:
    return subscription_uid[:_TAG_CHARS]


class AckId(NamedTuple):
    # A named tuple rather than a frozen dataclass: every delivered message makes
    # one and every ack or deadline change parses one; a tuple is built about
    # three times faster.
    tag: str
    kind: int
    offset: int
    delivery_id: int

    def __str__(self) -> str:
        return f"{self.tag}-{_KIND_LETTER[self.kind]}{self.offset}-{self.delivery_id}"

    @property
    def key(self) -> tuple[int, int]:
        return (self.kind, self.offset)

    @classmethod
    def parse(cls, text: str) -> AckId:
        match = _PATTERN.fullmatch(text) if isinstance(text, str) else None
        if match is None:
            raise errors.InvalidArgument(f"Invalid ack ID: {text!r}")
        tag, letter, offset, delivery = match.groups()
        return _new(cls, (tag, _LETTER_KIND[letter], int(offset), int(delivery)))


def parse_all(ack_ids: list[str]) -> list[AckId]:
    """Parse every id or none: one malformed id rejects the request unchanged."""
    if not ack_ids:
        raise errors.InvalidArgument("ackIds must not be empty")
    try:
        text = "\n".join(ack_ids)
    except TypeError:  # not all strings
        text = ""
    found = _LINES.findall(text) if text.count("\n") == len(ack_ids) - 1 else []
    if len(found) != len(ack_ids):  # name the first bad one
        for a in ack_ids:
            AckId.parse(a)
        raise errors.InvalidArgument("Invalid ack ID: an id spans lines")
    kinds = _LETTER_KIND
    return [_new(AckId, (t, kinds[k], int(o), int(d))) for t, k, o, d in found]
