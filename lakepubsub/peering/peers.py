"""Peering: the API processes serving one lake send each topic's writes to one of them.

A topic is one Delta table, and a Delta table commits one version at a time.
When several processes append to one topic, or commit one subscription's
leases, they race for every version: each loser rereads, replans and rewrites
(measured: two processes publishing to one topic gave 0.77x of one, and one of
them could carry 99% of the load). So the processes agree, without a leader,
which of them commits for each topic: its **owner** (``ownership.py``). The
others do the per-request work themselves (parsing, checking, encoding, building
Arrow columns, answering the client) and hand the owner only the columns to
commit (publish) or the request to apply (pull, acknowledge, deadline change)
over a gRPC call (``transport.py``); the owner's group commit and dispatcher
treat them like their own requests. A topic's subscriptions have the topic's
owner, so a publish wakes the waiting pulls in the same process.

The lake stays the only source of truth. Routing is an optimisation: when
processes disagree for a moment about who is alive, two of them commit to one
table and the compare-and-swap protocol keeps that correct, as it always has;
when the owner cannot be reached, the caller commits itself.

Who is alive is ``membership.py``: a joining process says hello to the others
and a stopping one goodbye, so routing follows at once. A process that commits
to the catalog tells the others, who then reread it. A clean stop deletes its
membership object; a killed process's object expires (and is swept after an
hour).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import threading
from collections.abc import Sequence
from concurrent.futures import Future

import grpc
import orjson
import pyarrow as pa

from lakepubsub import aio_loop, metrics
from lakepubsub.messages import Pull, ReceivedMessage
from lakepubsub.peering import codec, ownership, transport
from lakepubsub.peering.membership import MEMBERS, Member, Membership
from lakepubsub.peering.ownership import Owner
from lakepubsub.resources.names import SubscriptionName
from lakepubsub.settings.peering import PeerSettings

log = logging.getLogger(__name__)

# Hello, goodbye and change notices wait at most this long for each member.
TELL_TIMEOUT_S = 2.0
# A forwarded call waits at most this long beyond its own work (a pull's long poll).
CALL_MARGIN_S = 30.0


class Peering:
    """This process's membership, its peer server, and its calls to the others."""

    def __init__(
        self,
        engine: Owner,
        *,
        bind_host: str = "127.0.0.1",
        advertise_host: str | None = None,
        port: int = 0,
    ) -> None:
        self._engine = engine
        self.membership = Membership(engine.lake, lambda: engine.told(MEMBERS))
        self._client = transport.Client(
            forget=lambda member, quiet: self.membership.forget(member, quiet=quiet),
            answered=self.membership.answered,
        )
        self._bind_host = bind_host
        self._advertise = advertise_host or transport.advertised(bind_host)
        self._port = port
        self._stop = threading.Event()
        self._heartbeat: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: grpc.aio.Server | None = None

    @classmethod
    def from_env(cls, engine: Owner, environ: dict[str, str] | None = None) -> Peering | None:
        """A peering placed as ``PeerSettings`` reads it, or None when it is off."""
        settings = PeerSettings.from_env(environ)
        if not settings.enabled:
            return None
        return cls(
            engine,
            bind_host=settings.bind_host,
            advertise_host=settings.advertise_host,
            port=settings.port,
        )

    # -- the members -----------------------------------------------------------------

    @property
    def me(self) -> Member | None:
        return self.membership.me

    @property
    def members(self) -> tuple[Member, ...]:
        return self.membership.members

    def owner(self, uid: str) -> Member | None:
        """The process that commits for ``uid``'s tables, or None if it is this one."""
        return ownership.owner(self.membership.members, self.membership.me, uid)

    def forget(self, member: Member, *, quiet: bool = False) -> None:
        """Stop routing to ``member`` for a while (``Membership.forget``)."""
        self.membership.forget(member, quiet=quiet)

    # -- life cycle ------------------------------------------------------------------

    def start(self) -> None:
        # The process's grpc.aio loop, shared with the gRPC door (lakepubsub/aio_loop.py).
        loop = aio_loop.GRPC.acquire()
        try:
            asyncio.run_coroutine_threadsafe(self._start_server(), loop).result()
        except BaseException:
            aio_loop.GRPC.release()
            raise
        self._loop = self._client.loop = loop
        try:
            self.membership.beat()
            self._announce()
        except Exception:  # the lake is unreachable now: serve alone, the heartbeat retries
            log.warning("could not join the lake's other processes yet", exc_info=True)
        self._heartbeat = threading.Thread(target=self._beat_forever, name="peers", daemon=True)
        self._heartbeat.start()
        log.info("peer server on %s", self.me.address if self.me else "?")

    async def _start_server(self) -> None:
        membership = self.membership
        handlers = transport.Handlers(
            self._engine,
            lambda: membership.me,
            {"Hello": membership.joined, "Bye": membership.left, "Changed": self._engine.told},
        )
        self._server, port = await transport.start_server(handlers, self._bind_host, self._port)
        membership.me = Member(
            secrets.token_hex(6), self._advertise, port, secrets.token_hex(16), membership.hostname
        )

    def stop(self) -> None:
        """Leave: delete the membership object, then end the server (calls in
        flight get a few seconds; callers that then fail commit themselves)."""
        self._stop.set()
        if self._heartbeat is not None:
            self._heartbeat.join()
        loop, server = self._loop, self._server
        if self.me is not None and loop is not None:
            self._tell_all("Bye", self.me.key.encode(), wait=True, quiet=True)
        # A second stop does nothing.
        self._loop = self._client.loop = self._server = None
        if loop is not None:
            self.membership.leave()
            if server is not None:
                asyncio.run_coroutine_threadsafe(self._shut(server), loop).result()
            aio_loop.GRPC.release()

    async def _shut(self, server: grpc.aio.Server) -> None:
        await server.stop(5.0)
        await self._client.close()

    def _beat_forever(self) -> None:
        while not self._stop.wait(self.membership.heartbeat_s):
            try:
                self.membership.beat()
            except Exception:  # the lake is unreachable: keep the last view
                log.warning("peer heartbeat failed", exc_info=True)

    # -- notices ---------------------------------------------------------------------

    def _announce(self) -> None:
        """Tell the processes already here that this one joined, so they route to it
        now rather than at their next listing (until then two processes would
        commit to the topics this one owns, and contend)."""
        assert self.me is not None
        # A member listed but not answering is most often this host's previous
        # process, killed: left out quietly.
        self._tell_all("Hello", self.me.key.encode(), wait=True, quiet=True)

    def _tell_all(self, method: str, body: bytes, *, wait: bool, quiet: bool = False) -> None:
        """Call ``method`` on every other member; a member that misses it learns at
        its next listing (or check)."""
        calls = [
            self._client.call(m, method, body, TELL_TIMEOUT_S, quiet=quiet)
            for m in self.members
            if m != self.me
        ]
        for call in calls:
            if wait:
                with contextlib.suppress(Exception):
                    call.result()
            else:
                call.add_done_callback(lambda done: done.exception())  # consumed, not raised

    def tell(self, what: str) -> None:
        """Tell the other members this process committed to ``what`` (the catalog), so
        they drop their cached copy now. Does not wait."""
        self._tell_all("Changed", what.encode(), wait=False)

    def joined(self, key: str) -> None:
        """A process announced itself."""
        self.membership.joined(key)

    def left(self, key: str) -> None:
        """A process said goodbye: route nothing more to it."""
        self.membership.left(key)

    # -- calls to the owner ----------------------------------------------------------

    def publish(self, member: Member, topic_uid: str, columns: pa.Table) -> Future[int]:
        """Have ``member`` commit ``columns`` to the topic: a future of their first offset."""
        head = orjson.dumps({"topic": topic_uid})
        body = len(head).to_bytes(4, "big") + head + codec.ipc(columns)
        metrics.PEER_CALLS.labels("publish").inc()
        return transport.then(
            self._client.call(member, "Publish", body, CALL_MARGIN_S),
            lambda answer: int(orjson.loads(answer)["first"]),
        )

    def pull(
        self, member: Member, subscription: str, pull: Pull
    ) -> Future[Sequence[ReceivedMessage]]:
        body = orjson.dumps({"subscription": subscription, **pull.to_json()})
        metrics.PEER_CALLS.labels("pull").inc()
        name = SubscriptionName.parse(subscription)
        return transport.then(
            self._client.call(member, "Pull", body, pull.wait_s + CALL_MARGIN_S),
            codec.deliveries_from_ipc,
            orphan=lambda got: self._engine.release(name, got),
        )

    def acknowledge(
        self, member: Member, subscription: str, ack_ids: list[str], deadline_s: int | None
    ) -> Future[dict[str, str]]:
        body = orjson.dumps(
            {"subscription": subscription, "ack_ids": ack_ids, "deadline_s": deadline_s}
        )
        metrics.PEER_CALLS.labels("ack").inc()
        return transport.then(self._client.call(member, "Ack", body, CALL_MARGIN_S), orjson.loads)
