"""List pages: at most a page size of entries after the one a page token names."""

from __future__ import annotations

import base64
from collections.abc import Callable

from lakepubsub import errors
from lakepubsub.resources import catalog as cat

DEFAULT_PAGE_SIZE = 100
MAX_PAGE_SIZE = 1_000


def by_name(entry: cat.Entry) -> str:
    return entry.name


def page(
    entries: list[cat.Entry],
    page_size: int,
    page_token: str,
    key: Callable[[cat.Entry], str] = by_name,
) -> tuple[list[cat.Entry], str]:
    """A page of ``entries`` (sorted by ``key``), after the one the token names."""
    if page_size < 0:
        raise errors.InvalidArgument("pageSize must not be negative")
    size = min(page_size or DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)
    start = 0
    if page_token:
        try:
            after = base64.urlsafe_b64decode(page_token.encode()).decode()
        except (ValueError, UnicodeDecodeError) as exc:
            raise errors.InvalidArgument("Invalid pageToken") from exc
        start = next((i for i, e in enumerate(entries) if key(e) > after), len(entries))
    found = entries[start : start + size]
    more = start + size < len(entries)
    token = base64.urlsafe_b64encode(key(found[-1]).encode()).decode() if more else ""
    return found, token
