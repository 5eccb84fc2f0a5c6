"""Who serves the lake with this process. Membership is one object per process
under ``{root}/peers``, named ``{id}~{host}~{port}~{token}~{hostname}`` (so one
listing, no reads, tells everything) and rewritten every ``HEARTBEAT_S``
(``S3_HEARTBEAT_S`` on S3); a process whose object is older than ``EXPIRY_S``
(``S3_EXPIRY_S``) is gone. Hello and goodbye notices change the view at once;
a member a call could not reach is left out for a while (``forget``)."""

from __future__ import annotations

import contextlib
import logging
import socket
import time
from collections.abc import Callable
from typing import NamedTuple

from lakepubsub._lake import Lake

log = logging.getLogger(__name__)

# On a local lake a beat (a write and a listing) costs nothing; on S3 it is a PUT
# and a LIST ($0.43 a month at one a minute), and a member needs the listing only
# to find processes that could not say hello, or died without a goodbye: a
# failed call already leaves an unreachable owner out (``forget``).
HEARTBEAT_S = 5.0
EXPIRY_S = 20.0
S3_HEARTBEAT_S = 60.0
S3_EXPIRY_S = 200.0
SWEEP_S = 3600.0
PEERS_DIR = "peers"


# A member a call could not reach is left out for this long, doubling with each
# failure in a row up to the maximum, and then only once it has beaten again.
SUSPECT_S = 5.0
SUSPECT_MAX_S = 300.0
_LOOPBACK = ("127.0.0.1", "localhost", "::1")
# What ``Owner.told`` hears when the members changed (owners of topics may move).
MEMBERS = "members"


def expiry_s(s3: bool) -> float:
    """How old a member's heartbeat object may be before the member counts as gone."""
    return S3_EXPIRY_S if s3 else EXPIRY_S


class Member(NamedTuple):
    id: str
    host: str
    port: int
    token: str
    hostname: str

    @property
    def address(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    @property
    def key(self) -> str:
        return "~".join((self.id, self.host, str(self.port), self.token, self.hostname))

    @classmethod
    def parse(cls, key: str) -> Member | None:
        parts = key.split("~")
        if len(parts) != len(cls._fields) or not parts[2].isdigit():
            return None
        return cls(parts[0], parts[1], int(parts[2]), parts[3], parts[4])


class Membership:
    """This process's view of the members; ``on_change`` when it changed."""

    def __init__(self, lake: Lake, on_change: Callable[[], None]) -> None:
        self._lake = lake
        s3 = lake.is_s3
        self.heartbeat_s = S3_HEARTBEAT_S if s3 else HEARTBEAT_S
        self._expiry_s = expiry_s(s3)
        self._on_change = on_change
        self.hostname = socket.gethostname().replace("~", "-")
        self.me: Member | None = None
        self._members: tuple[Member, ...] = ()
        # Members a call could not reach, and when: left out until they beat again.
        self._suspects: dict[Member, tuple[float, float]] = {}  # since, until
        self._failures: dict[Member, int] = {}

    @property
    def members(self) -> tuple[Member, ...]:
        return self._members

    def _uri(self, key: str) -> str:
        return self._lake.uri(PEERS_DIR, key)

    def beat(self) -> None:
        assert self.me is not None
        self._lake.objects.put(self._uri(self.me.key), b"")
        now = time.time()
        alive: list[Member] = []
        listed: set[Member] = set()
        for key, modified in self._lake.list_objects(PEERS_DIR):
            member = Member.parse(key)
            if member is None:
                continue
            listed.add(member)
            age = now - modified
            if age > SWEEP_S:
                with contextlib.suppress(Exception):
                    self._lake.objects.delete(self._uri(key))
            suspected = self._suspects.get(member)
            if suspected is not None and modified > suspected[0] and now > suspected[1]:
                del self._suspects[member]  # it beat since, and its time is up: try again
                suspected = None
            if age <= self._expiry_s and suspected is None and self._reachable(member):
                alive.append(member)
        for gone in [m for m in list(self._suspects) if m not in listed]:  # its object is gone
            self._suspects.pop(gone, None)
            self._failures.pop(gone, None)
        if self.me not in alive:
            alive.append(self.me)
        self._set_members(tuple(sorted(alive)))

    def leave(self) -> None:
        """Delete this process's object (a clean stop)."""
        if self.me is not None:
            with contextlib.suppress(Exception):
                self._lake.objects.delete(self._uri(self.me.key))

    def joined(self, key: str) -> None:
        """A process announced itself."""
        member = Member.parse(key)
        if member is not None and self._reachable(member) and member not in self._members:
            self._set_members(tuple(sorted((*self._members, member))))

    def left(self, key: str) -> None:
        """A process said goodbye: route nothing more to it."""
        member = Member.parse(key)
        if member is not None and member in self._members:
            self._set_members(tuple(m for m in self._members if m != member))

    def _set_members(self, members: tuple[Member, ...]) -> None:
        """Route by ``members`` from now on; tell the engine when ownership may move."""
        changed = members != self._members
        self._members = members
        if changed:
            self._on_change()

    def _reachable(self, member: Member) -> bool:
        """A loopback address means the same machine only."""
        return member.host not in _LOOPBACK or member.hostname == self.hostname

    def forget(self, member: Member, *, quiet: bool = False) -> None:
        """Stop routing to ``member`` for a while (longer after each failure in a row),
        and then until its next heartbeat is seen."""
        now = time.time()
        suspected = self._suspects.get(member)
        if suspected is not None and now < suspected[1]:  # calls that were already in flight
            return
        failures = self._failures.get(member, 0) + 1
        self._failures[member] = failures
        pause = min(SUSPECT_S * 2 ** (failures - 1), SUSPECT_MAX_S)
        self._suspects[member] = (now, now + pause)
        self._members = tuple(m for m in self._members if m != member)
        (log.info if quiet else log.warning)(
            "peer %s unreachable (%d in a row): its topics are committed here for %.0f s",
            member.address,
            failures,
            pause,
        )

    def answered(self, member: Member) -> None:
        """A call reached ``member``: its failures in a row start again from none."""
        self._failures.pop(member, None)
