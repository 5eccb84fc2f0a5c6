"""Which process owns a topic: the member that commits for its tables, chosen by
rendezvous hashing of the topic's uid over the members alive now (no leader,
and a member leaving moves only its own topics); and what an owner does for the
calls forwarded to it (``Owner``)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from concurrent.futures import Future
from typing import Protocol

import pyarrow as pa

from lakepubsub._lake import Lake
from lakepubsub.messages import Pull, ReceivedMessage
from lakepubsub.peering.membership import Member
from lakepubsub.resources.names import SubscriptionName


def owner(members: tuple[Member, ...], me: Member | None, uid: str) -> Member | None:
    """The member that commits for ``uid``'s tables, or None if it is ``me``."""
    if len(members) <= 1:  # alone: it owns everything
        return None
    best = max(members, key=lambda m: _score(uid, m.id))
    return None if best == me else best


def _score(uid: str, member_id: str) -> bytes:
    return hashlib.blake2b(f"{uid}/{member_id}".encode(), digest_size=8).digest()


class Owner(Protocol):
    """What peering needs of the engine: the owner's side of each forwarded call.
    (A protocol, so that peering does not import the engine that uses it.)"""

    lake: Lake

    def lookups_need_no_io(self) -> bool: ...

    def publish_forwarded(self, topic_uid: str, columns: pa.Table) -> Future[list[str]]: ...

    def pull_here(
        self, name: SubscriptionName, pull: Pull
    ) -> Future[Sequence[ReceivedMessage]]: ...

    def acknowledge_here(
        self, name: SubscriptionName, ack_ids: list[str], deadline_s: int | None
    ) -> Future[dict[str, str]]: ...

    def withdraw(self, name: SubscriptionName, pull: Future[Sequence[ReceivedMessage]]) -> None: ...

    def release(self, name: SubscriptionName, received: Sequence[ReceivedMessage]) -> None: ...

    def told(self, what: str) -> None: ...
