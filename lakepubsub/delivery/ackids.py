"""Ack ids name one delivery: subscription incarnation, message (or event), delivery id.

Delivery ids are unique and increasing within a subscription, so "only the
newest ack id of a message is valid" (exactly-once) is a comparison with the
lease row's ``delivery_id``.
"""

from __future__ import annotations

import re
from concurrent.futures import Future
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
# The failure reported for an ack id that names no live delivery: expired or already
# settled under exactly-once, or malformed (Pub/Sub's AcknowledgeConfirmation.
# invalid_ack_ids holds both kinds).
INVALID_ACK_ID = "PERMANENT_FAILURE_INVALID_ACK_ID"


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


def _scan(ack_ids: list[str]) -> list[AckId] | None:
    """Every id parsed, by one scan of their joined text; None if any is malformed."""
    try:
        text = "\n".join(ack_ids)
    except TypeError:  # not all strings
        return None
    found = _LINES.findall(text) if text.count("\n") == len(ack_ids) - 1 else []
    if len(found) != len(ack_ids):
        return None
    kinds = _LETTER_KIND
    return [_new(AckId, (t, kinds[k], int(o), int(d))) for t, k, o, d in found]


def parse_all(ack_ids: list[str]) -> list[AckId]:
    """Parse every id or none: one malformed id rejects the request unchanged."""
    if not ack_ids:
        raise errors.InvalidArgument("ackIds must not be empty")
    parsed = _scan(ack_ids)
    if parsed is None:  # name the first bad one
        for a in ack_ids:
            AckId.parse(a)
        raise errors.InvalidArgument("Invalid ack ID: an id spans lines")
    return parsed


def split_malformed(ack_ids: list[str]) -> tuple[list[str], list[AckId], dict[str, str]]:
    """The ids of an acknowledge or deadline change, as every door answers them: the
    well-formed ones (as given, and parsed) go on; each malformed one is an invalid ack
    id, reported as a failure of its own (``INVALID_ACK_ID``), as Pub/Sub reports an
    expired one, and does not stop the others. An empty list is refused."""
    if not ack_ids:
        raise errors.InvalidArgument("ackIds must not be empty")
    parsed = _scan(ack_ids)
    if parsed is not None:
        return ack_ids, parsed, {}
    good: list[str] = []
    parsed = []
    malformed: dict[str, str] = {}
    for a in ack_ids:
        try:
            parsed.append(AckId.parse(a))
            good.append(a)
        except errors.InvalidArgument:
            malformed[str(a)] = INVALID_ACK_ID
    return good, parsed, malformed


def with_failures(
    future: Future[dict[str, str]] | None, failures: dict[str, str]
) -> Future[dict[str, str]]:
    """``future``'s per-id failures (None: nothing was sent) with ``failures`` added."""
    if future is not None and not failures:
        return future
    out: Future[dict[str, str]] = Future()
    if future is None:
        out.set_result(dict(failures))
        return out

    def done(answered: Future[dict[str, str]]) -> None:
        if answered.cancelled():
            out.cancel()
        elif (exc := answered.exception()) is not None:
            out.set_exception(exc)
        else:
            out.set_result({**failures, **answered.result()})

    future.add_done_callback(done)
    return out
