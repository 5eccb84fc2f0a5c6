"""Ack ids name one delivery: subscription incarnation, message (or event), delivery id.

Delivery ids are unique and increasing within a subscription, so "only the
newest ack id of a message is valid" (exactly-once) is a comparison with the
lease row's ``delivery_id``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from lakepubsub import errors, schemas

_TAG_CHARS = 8
_PATTERN = re.compile(r"([0-9a-f]{8})-([me])(\d{1,19})-(\d{1,19})")
_KIND_LETTER = {schemas.KIND_MESSAGE: "m", schemas.KIND_EVENT: "e"}
_LETTER_KIND = {v: k for k, v in _KIND_LETTER.items()}


def subscription_tag(subscription_uid: str) -> str:
    return subscription_uid[:_TAG_CHARS]


@dataclass(frozen=True)
class AckId:
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
        return cls(tag, _LETTER_KIND[letter], int(offset), int(delivery))


def parse_all(ack_ids: list[str]) -> list[AckId]:
    """Parse every id or none: one malformed id rejects the request unchanged."""
    if not ack_ids:
        raise errors.InvalidArgument("ackIds must not be empty")
    return [AckId.parse(a) for a in ack_ids]
