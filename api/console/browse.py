"""The message browser: a topic's history read straight from its messages table.

Reads never touch a subscription: no lease, no cursor, no delivery counted.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from dataclasses import dataclass

from lakepubsub import Engine, errors
from lakepubsub.messages import Message, from_arrow
from lakepubsub.publish.messages_table import MessagesTable

# Messages one page shows at most.
PAGE_MESSAGES = 50
# Messages an attribute or time filter looks through for one page at most.
SCAN_MESSAGES = 20_000
# Offsets read per step of a scan: a page's worth first (small publishes make many
# small files, each a read), doubling up to this.
SCAN_STEP = 1_000
# Topic handles kept between requests (opening one reads the table's log).
HANDLES = 16
# Bytes of a payload shown at most.
SHOWN_BYTES = 4096


@dataclass(frozen=True)
class Query:
    """What to show: from an offset, or from a time; optionally ``key=value`` matches."""

    start: int | None = None
    end: int | None = None
    since_us: int | None = None
    until_us: int | None = None
    attribute: tuple[str, str] | None = None
    newest_first: bool = True


@dataclass(frozen=True)
class Page:
    messages: list[Message]
    oldest: int  # the first offset the table still holds
    head: int
    scanned: int  # offsets looked through
    next_start: int | None  # where the next (older, or newer) page begins


class Handles:
    """Open messages tables by topic uid, each used by one request at a time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: OrderedDict[str, tuple[threading.Lock, MessagesTable]] = OrderedDict()

    def get(self, engine: Engine, uid: str) -> tuple[threading.Lock, MessagesTable]:
        with self._lock:
            found = self._open.get(uid)
            if found is not None:
                self._open.move_to_end(uid)
                return found
        made = (threading.Lock(), MessagesTable(engine.lake, uid))
        with self._lock:
            found = self._open.setdefault(uid, made)
            while len(self._open) > HANDLES:
                self._open.popitem(last=False)
            return found


def read(handles: Handles, engine: Engine, topic_uid: str, query: Query) -> Page:
    """One page of messages matching ``query``, newest first unless asked otherwise."""
    lock, table = handles.get(engine, topic_uid)
    with lock:
        table.refresh()
        head = table.head()
        oldest = table.first_offset_at(0) if head else 0
        if query.since_us is not None and query.start is None:
            start = table.first_offset_at(query.since_us)
            return _scan(table, query, start, head, oldest, head, forward=True)
        if query.newest_first:
            end = min(head, query.end if query.end is not None else head)
            return _scan(
                table, query, max(oldest, end - 1), oldest - 1, oldest, head, forward=False
            )
        start = max(oldest, query.start or 0)
        end = min(head, query.end if query.end is not None else head)
        return _scan(table, query, start, end, oldest, head, forward=True)


def _scan(
    table: MessagesTable,
    query: Query,
    first: int,
    stop: int,
    oldest: int,
    head: int,
    *,
    forward: bool,
) -> Page:
    """From offset ``first`` towards ``stop`` (exclusive), in steps, keeping matches."""
    found: list[Message] = []
    at, scanned, step = first, 0, PAGE_MESSAGES
    while scanned < SCAN_MESSAGES and (at < stop if forward else at > stop):
        if forward:
            lo, hi = at, min(stop, at + step)
        else:
            lo, hi = max(stop + 1, at - step + 1), at + 1
        rows = from_arrow(table.read_range(lo, hi))
        scanned += hi - lo
        if not forward:
            rows.reverse()
        for message in rows:
            if forward and query.until_us is not None and message.publish_time_us >= query.until_us:
                return Page(found, oldest, head, scanned, None)
            if _matches(message, query):
                found.append(message)
                if len(found) == PAGE_MESSAGES:
                    after = message.offset + 1 if forward else message.offset - 1
                    return Page(found, oldest, head, scanned, after)
        at = hi if forward else lo - 1
        step = min(SCAN_STEP, step * 2)
    done = at >= stop if forward else at <= stop
    return Page(found, oldest, head, scanned, None if done else at)


def _matches(message: Message, query: Query) -> bool:
    if query.since_us is not None and message.publish_time_us < query.since_us:
        return False
    if query.until_us is not None and message.publish_time_us >= query.until_us:
        return False
    if query.attribute is not None:
        key, value = query.attribute
        if message.attributes.get(key) != value:
            return False
    return True


def parse_attribute(text: str) -> tuple[str, str] | None:
    """``key=value`` -> (key, value); empty -> None."""
    text = text.strip()
    if not text:
        return None
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise errors.InvalidArgument("attribute filter must be key=value")
    return key.strip(), value.strip()


def as_text(data: bytes) -> str:
    return data[:SHOWN_BYTES].decode("utf-8", errors="replace")


def as_json(data: bytes) -> str | None:
    """Pretty JSON if the payload is JSON, else None."""
    try:
        return json.dumps(json.loads(data), indent=2, ensure_ascii=False)[: SHOWN_BYTES * 2]
    except (ValueError, UnicodeDecodeError):
        return None


# Bytes shown as themselves in a hex dump: ASCII space to tilde.
_PRINTABLE = range(0x20, 0x7F)


def as_hex(data: bytes) -> str:
    """16 bytes a line: offset, hex, printable characters."""
    lines = []
    for at in range(0, min(len(data), SHOWN_BYTES), 16):
        chunk = data[at : at + 16]
        printable = "".join(chr(b) if b in _PRINTABLE else "." for b in chunk)
        lines.append(f"{at:08x}  {chunk.hex(' '):<47}  {printable}")
    return "\n".join(lines)
