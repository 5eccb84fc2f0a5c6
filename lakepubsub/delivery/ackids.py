"""Ack ids name one delivery: subscription incarnation, message (or event), delivery id.

Delivery ids are unique and increasing within a subscription, so "only the
newest ack id of a message is valid" (exactly-once) is a comparison with the
lease row's ``delivery_id``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from concurrent.futures import Future
from typing import NamedTuple, overload

import numpy as np

from lakepubsub import errors
from lakepubsub._lake import table_schemas

_TAG_CHARS = 8
_ID = r"([0-9a-f]{8})-([me])([0-9]{1,19})-([0-9]{1,19})"
_PATTERN = re.compile(_ID)
_TAG = re.compile("[0-9a-f]{8}")
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


class MessageIds(Sequence[AckId]):
    """Ack ids of messages of one subscription (one tag), parsed in bulk: their
    offsets and delivery ids, as lists of ints when asked for. It reads as a
    sequence of ``AckId`` (built as they are looked at); an ack of a subscription
    without exactly-once needs only the offsets (``PlannedRows.settle``), the gRPC
    door's routing only the delivery ids as numpy's (``deliveries``).

    Written by hand because an ``AckId`` per id (four substrings, two ints and a
    tuple) was about 0.6 µs of every acknowledged message of a StreamingPull drain:
    here one numpy read of the joined text (``_scan_messages``) yields both numbers
    of every id; ids with a number past ``_FAST_LIMIT`` are read by a regular
    expression, their delivery ids only when something asks for them."""

    __slots__ = ("_delivery_ids", "_numbers", "_offsets", "_text", "deliveries", "tag")

    def __init__(
        self,
        tag: str,
        offsets: list[int] | None,
        delivery_ids: list[int] | None = None,
        text: str = "",
        numbers: np.ndarray | None = None,
    ) -> None:
        self.tag = tag
        self._offsets = offsets
        self._delivery_ids = delivery_ids
        self._text = text  # the ids, one per line, when delivery_ids is None
        # The delivery ids as numpy int64, when they were read that way (every number
        # under ``_FAST_LIMIT``): what the gRPC door routes acks by (api/grpc/streams.py).
        self.deliveries: np.ndarray | None = None if numbers is None else numbers[1::2]
        self._numbers = numbers  # offset, delivery id, ... (when offsets is None)

    @property
    def offsets(self) -> list[int]:
        # As Python ints only when asked for: a receipt change the door answers never is.
        if self._offsets is None:
            assert self._numbers is not None
            self._offsets = self._numbers[0::2].tolist()
        return self._offsets

    @property
    def delivery_ids(self) -> list[int]:
        if self._delivery_ids is None:
            if self.deliveries is not None:
                self._delivery_ids = self.deliveries.tolist()
            else:
                found = _DELIVERY_LINES.findall(self._text)
                self._delivery_ids = list(map(int, found))
        return self._delivery_ids

    def __len__(self) -> int:
        return len(self.offsets) if self.deliveries is None else len(self.deliveries)

    @overload
    def __getitem__(self, index: int) -> AckId: ...

    @overload
    def __getitem__(self, index: slice) -> MessageIds: ...

    def __getitem__(self, index: int | slice) -> AckId | MessageIds:
        if isinstance(index, slice):
            return MessageIds(self.tag, self.offsets[index], self.delivery_ids[index])
        return _new(AckId, (self.tag, _MESSAGE, self.offsets[index], self.delivery_ids[index]))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, MessageIds | list | tuple):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __iter__(self) -> Iterator[AckId]:
        tag, kind, new = self.tag, _MESSAGE, _new
        for offset, delivery in zip(self.offsets, self.delivery_ids, strict=True):
            yield new(AckId, (tag, kind, offset, delivery))


# Message ids of one tag, one per line: their offsets (by tag, compiled once); and
# the delivery ids of lines already checked.
_MESSAGE_LINES: dict[str, re.Pattern[str]] = {}
_DELIVERY_LINES = re.compile("-([0-9]+)$", re.MULTILINE)
_MESSAGE = table_schemas.KIND_MESSAGE


_DIGITS = b"0123456789"
# Offsets and delivery ids of up to 18 digits fit an int64 whatever their digits.
_FAST_LIMIT = 10**18


_ZERO = ord("0")
_DASH = ord("-")
_NEWLINE = ord("\n")
# The powers of ten of a number of up to 18 digits (below ``_FAST_LIMIT``), highest
# first.
_TENS = 10 ** np.arange(17, -1, -1, dtype=np.int64)


def _scan_alike(text: str, count: int) -> MessageIds | None:
    """``_scan_messages`` for ids that all have one length, with their two numbers
    of as many digits each (ids handed out together mostly do): the ids as the rows
    of a matrix of bytes, checked and read a column at a time. None for any other
    text (``_scan_messages`` reads it).

    About half the time of ``_scan_messages``'s replaces and text parse, which cost
    0.1 µs an id: the Go client sends every message's ack id twice (a deadline
    change on receipt, then the ack)."""
    width = len(text) // count + 1  # an id and its newline
    if width * count != len(text) + 1 or width < _TAG_CHARS + 6:
        return None
    raw = (text + "\n").encode()
    if len(raw) != width * count:  # not ASCII
        return None
    rows = np.frombuffer(raw, np.uint8).reshape(count, width)
    first = raw[:width]
    dash = first.find(b"-", _TAG_CHARS + 2)
    if first[_TAG_CHARS : _TAG_CHARS + 2] != b"-m" or not _TAG_CHARS + 3 <= dash < width - 2:
        return None
    # Every row: the first row's tag and "-m", digits, a dash where the first row has
    # it, digits, and its newline (the text has no other: every row ends there).
    head = np.frombuffer(first, np.uint8, _TAG_CHARS + 2)
    if not (rows[:, : _TAG_CHARS + 2] == head).all() or _TAG.fullmatch(text[:_TAG_CHARS]) is None:
        return None
    if not ((rows[:, dash] == _DASH).all() and (rows[:, -1] == _NEWLINE).all()):
        return None
    numbers = np.empty(2 * count, np.int64)
    for at, digits in ((0, rows[:, _TAG_CHARS + 2 : dash]), (1, rows[:, dash + 1 : -1])):
        values = digits - np.uint8(_ZERO)  # below "0" wraps past 9
        if digits.shape[1] > len(_TENS) or not (values < len(_DIGITS)).all():
            return None
        numbers[at::2] = values @ _TENS[len(_TENS) - digits.shape[1] :]
    return MessageIds(text[:_TAG_CHARS], None, numbers=numbers)


def _scan_messages(text: str, count: int) -> MessageIds | None:
    """``count`` ids (``text``, one per line) if all are message ids of the first
    one's tag.

    By bytes' own methods and one numpy parse, not a regular expression: one
    ``{tag}-m`` per line, then only digits and one dash (all in C over the whole
    text); numpy reads two numbers a line, so an empty one shows in their count.
    127 ns an id, where a regular expression's match and an ``int`` per id took
    197 (2,500 ids at a time)."""
    alike = _scan_alike(text, count)
    if alike is not None:
        return alike
    tag = text[:_TAG_CHARS]
    if _TAG.fullmatch(tag) is None:
        return None
    raw = ("\n" + text).encode()
    prefix = f"\n{tag}-m".encode()
    if raw.count(prefix) != count:  # a line that is not a message id of this tag
        return None
    body = raw.replace(prefix, b" ")  # " {offset}-{delivery}" per id
    if body.translate(None, _DIGITS) != b" -" * count:  # digits, a dash, digits
        return None
    numbers = np.fromstring(body.replace(b"-", b" "), dtype=np.int64, sep=" ")
    if len(numbers) != 2 * count:  # a number was empty
        return None
    if int(numbers.max()) >= _FAST_LIMIT:
        return _scan_long(text, tag, count)
    return MessageIds(tag, None, numbers=numbers)


def _scan_long(text: str, tag: str, count: int) -> MessageIds | None:
    """``_scan_messages`` for ids with numbers past ``_FAST_LIMIT``: by a regular
    expression, with Python's ints."""
    pattern = _MESSAGE_LINES.get(tag)
    if pattern is None:
        pattern = _MESSAGE_LINES[tag] = re.compile(
            f"^{tag}-m([0-9]{{1,19}})-[0-9]{{1,19}}$", re.MULTILINE
        )
    found = pattern.findall(text)
    if len(found) != count:
        return None
    return MessageIds(tag, list(map(int, found)), text=text)


def _scan(ack_ids: list[str]) -> Sequence[AckId] | None:
    """Every id parsed, by one scan of their joined text; None if any is malformed."""
    try:
        text = "\n".join(ack_ids)
    except TypeError:  # not all strings
        return None
    if text.count("\n") != len(ack_ids) - 1:
        return None
    if (messages := _scan_messages(text, len(ack_ids))) is not None:
        return messages
    found = _LINES.findall(text)
    if len(found) != len(ack_ids):
        return None
    kinds = _LETTER_KIND
    return [_new(AckId, (t, kinds[k], int(o), int(d))) for t, k, o, d in found]


def parse_all(ack_ids: list[str]) -> Sequence[AckId]:
    """Parse every id or none: one malformed id rejects the request unchanged."""
    if not ack_ids:
        raise errors.InvalidArgument("ackIds must not be empty")
    parsed = _scan(ack_ids)
    if parsed is None:  # name the first bad one
        for a in ack_ids:
            AckId.parse(a)
        raise errors.InvalidArgument("Invalid ack ID: an id spans lines")
    return parsed


class Split(NamedTuple):
    """An acknowledge's or deadline change's ids: the well-formed ones as given, the
    same parsed, and a failure for each malformed one."""

    ids: list[str]
    parsed: Sequence[AckId]
    malformed: dict[str, str]


def split_malformed(ack_ids: list[str]) -> Split:
    """The ids of an acknowledge or deadline change, as every door answers them: the
    well-formed ones (as given, and parsed) go on; each malformed one is an invalid ack
    id, reported as a failure of its own (``INVALID_ACK_ID``), as Pub/Sub reports an
    expired one, and does not stop the others. An empty list is refused."""
    if not ack_ids:
        raise errors.InvalidArgument("ackIds must not be empty")
    parsed = _scan(ack_ids)
    if parsed is not None:
        return Split(ack_ids, parsed, {})
    good: list[str] = []
    each: list[AckId] = []
    malformed: dict[str, str] = {}
    for a in ack_ids:
        try:
            each.append(AckId.parse(a))
            good.append(a)
        except errors.InvalidArgument:
            malformed[str(a)] = INVALID_ACK_ID
    return Split(good, each, malformed)


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
