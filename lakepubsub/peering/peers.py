"""Peering: the API processes serving one lake send each topic's writes to one of them.

A topic is one Delta table, and a Delta table commits one version at a time.
When several processes append to one topic, or commit one subscription's
leases, they race for every version: each loser rereads, replans and rewrites
(measured: two processes publishing to one topic gave 0.77x of one, and one of
them could carry 99% of the load). So the processes agree, without a leader,
which of them commits for each topic: its **owner**, chosen by rendezvous
hashing of the topic's uid over the processes alive now. The others do the
per-request work themselves (parsing, checking, encoding, building Arrow
columns, answering the client) and hand the owner only the columns to commit
(publish) or the request to apply (pull, acknowledge, deadline change) over a
gRPC call; the owner's group commit and dispatcher treat them like their own
requests. A topic's subscriptions have the topic's owner, so a publish wakes
the waiting pulls in the same process.

The lake stays the only source of truth. Routing is an optimisation: when
processes disagree for a moment about who is alive, two of them commit to one
table and the compare-and-swap protocol keeps that correct, as it always has;
when the owner cannot be reached, the caller commits itself.

Membership is one object per process under ``{root}/peers``, named
``{id}~{host}~{port}~{token}~{hostname}`` (so one listing, no reads, tells
everything) and rewritten every ``HEARTBEAT_S`` (``S3_HEARTBEAT_S`` on S3); a
process whose object is older than ``EXPIRY_S`` (``S3_EXPIRY_S``) is gone. A
joining process says hello to the others and a stopping one goodbye, so
routing follows at once. A process that commits to the catalog tells the
others, who then reread it. A clean stop deletes the object; a killed process's
object expires (and is swept after an hour). The token, fresh per process,
must come with every call: only someone who can list the lake can call a
peer, and a call that reaches the wrong process (a reused address) is refused
and handled as unreachable.

The calls are gRPC with raw bytes (grpcio's generic handlers): a publish is an
Arrow IPC stream of the columns; a pull's answer is an Arrow IPC stream of
the deliveries; the rest is JSON. A failure the owner reports (an error class
of ``lakepubsub.errors``) is raised as that class; an owner that cannot be
reached makes the caller do the work itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, InvalidStateError
from typing import Any, NamedTuple, Protocol, TypeVar

import grpc
import orjson
import pyarrow as pa

from lakepubsub import errors, metrics
from lakepubsub._lake import Lake, table_schemas
from lakepubsub.messages import ReceivedMessage, TruncationEvent, from_arrow
from lakepubsub.resources.names import SubscriptionName

log = logging.getLogger(__name__)
T = TypeVar("T")

# On a local lake a beat (a write and a listing) costs nothing; on S3 it is a PUT
# and a LIST ($0.43 a month at one a minute), and a member needs the listing only
# to find processes that could not say hello, or died without a goodbye: a
# failed call already leaves an unreachable owner out (``forget``).
HEARTBEAT_S = 5.0
EXPIRY_S = 20.0
S3_HEARTBEAT_S = 60.0
S3_EXPIRY_S = 200.0
SWEEP_S = 3600.0
# Hello, goodbye and change notices wait at most this long for each member.
TELL_TIMEOUT_S = 2.0
PEERS_DIR = "peers"
PORT_RANGE = 64
# A forwarded call waits at most this long beyond its own work (a pull's long poll).
CALL_MARGIN_S = 30.0
_MAX_MESSAGE = 96 * 1024 * 1024  # a group commit is at most 64 MiB of messages
_OPTIONS = [
    ("grpc.max_send_message_length", _MAX_MESSAGE),
    ("grpc.max_receive_message_length", _MAX_MESSAGE),
]
# A peer that drops connection attempts (a closed port range between hosts) must
# fail the first call within about a second, not grpcio's default 20 s.
_CLIENT_OPTIONS = [
    *_OPTIONS,
    ("grpc.initial_reconnect_backoff_ms", 500),
    ("grpc.min_reconnect_backoff_ms", 1000),
    ("grpc.max_reconnect_backoff_ms", 5000),
]
# A member a call could not reach is left out for this long, doubling with each
# failure in a row up to the maximum, and then only once it has beaten again.
SUSPECT_S = 5.0
SUSPECT_MAX_S = 300.0
_SERVICE = "/lakepubsub.peer.v1.Peer/"
_TOKEN = "lakepubsub-peer-token"
_ERROR = "lakepubsub-error"
_LOOPBACK = ("127.0.0.1", "localhost", "::1")

_Context = Any  # grpc.aio.ServicerContext[bytes, bytes]
# A pull's deliveries: the messages table's columns (null in an event's row), so
# ``messages.from_arrow`` reads them back, with the delivery's own fields.
_DELIVERIES = pa.schema(
    [
        ("ack_id", pa.string()),
        ("delivery_attempt", pa.int32()),
        ("event", pa.string()),  # JSON of a truncation event; null for messages
        *(pa.field(f.name, f.type) for f in table_schemas.MESSAGES),
    ]
)


class Unreachable(Exception):
    """The owner could not be asked (down, refused, another process at its address)."""


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
        if len(parts) != 5 or not parts[2].isdigit():
            return None
        return cls(parts[0], parts[1], int(parts[2]), parts[3], parts[4])


def _score(uid: str, member_id: str) -> bytes:
    return hashlib.blake2b(f"{uid}/{member_id}".encode(), digest_size=8).digest()


class Owner(Protocol):
    """What peering needs of the engine: the owner's side of each forwarded call.
    (A protocol, so that peering does not import the engine that uses it.)"""

    lake: Lake

    def lookups_need_no_io(self) -> bool: ...

    def publish_forwarded(self, topic_uid: str, columns: pa.Table) -> Future[list[str]]: ...

    def pull_here(
        self,
        name: SubscriptionName,
        *,
        max_messages: int,
        wait_s: float,
        ack_deadline_s: int | None,
    ) -> Future[list[ReceivedMessage]]: ...

    def acknowledge_here(
        self, name: SubscriptionName, ack_ids: list[str], deadline_s: int | None
    ) -> Future[dict[str, str]]: ...

    def withdraw(self, name: SubscriptionName, pull: Future[list[ReceivedMessage]]) -> None: ...

    def release(self, name: SubscriptionName, received: Sequence[ReceivedMessage]) -> None: ...

    def told(self, what: str) -> None: ...


# What ``Owner.told`` hears when the members changed (owners of topics may move).
MEMBERS = "members"


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
        self._lake = engine.lake
        s3 = self._lake.is_s3
        self._heartbeat_s = S3_HEARTBEAT_S if s3 else HEARTBEAT_S
        self._expiry_s = S3_EXPIRY_S if s3 else EXPIRY_S
        self._bind_host = bind_host
        self._advertise = advertise_host or _advertised(bind_host)
        self._port = port
        self._hostname = socket.gethostname().replace("~", "-")
        self.me: Member | None = None
        self._members: tuple[Member, ...] = ()
        # Members a call could not reach, and when: left out until they beat again.
        self._suspects: dict[Member, tuple[float, float]] = {}  # since, until
        self._failures: dict[Member, int] = {}
        self._channels: dict[str, tuple[Member, grpc.aio.Channel]] = {}
        self._stop = threading.Event()
        self._heartbeat: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: grpc.aio.Server | None = None
        self._thread: threading.Thread | None = None

    @classmethod
    def from_env(cls, engine: Owner, environ: dict[str, str] | None = None) -> Peering | None:
        """``LAKEPUBSUB_PEERING=false`` turns peering off; ``LAKEPUBSUB_PEER_HOST`` (bind,
        default 127.0.0.1), ``LAKEPUBSUB_PEER_ADVERTISE`` and ``LAKEPUBSUB_PEER_PORT``
        (default: any free port; else the first free one of ``PORT_RANGE`` from it) place
        the peer server."""
        env = os.environ if environ is None else environ
        if env.get("LAKEPUBSUB_PEERING", "true").lower() in ("0", "false", "no", "off"):
            return None
        return cls(
            engine,
            bind_host=env.get("LAKEPUBSUB_PEER_HOST", "127.0.0.1"),
            advertise_host=env.get("LAKEPUBSUB_PEER_ADVERTISE") or None,
            port=int(env.get("LAKEPUBSUB_PEER_PORT", "0")),
        )

    # -- life cycle ------------------------------------------------------------------

    def start(self) -> None:
        ready = threading.Event()
        failure: list[BaseException] = []

        def serve() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            try:
                loop.run_until_complete(self._start_server())
            except BaseException as exc:  # reported to start()
                failure.append(exc)
                ready.set()
                return
            ready.set()
            loop.run_forever()
            loop.close()

        self._thread = threading.Thread(target=serve, name="peer-server", daemon=True)
        self._thread.start()
        ready.wait()
        if failure:
            raise failure[0]
        try:
            self._beat()
            self._announce()
        except Exception:  # the lake is unreachable now: serve alone, the heartbeat retries
            log.warning("could not join the lake's other processes yet", exc_info=True)
        self._heartbeat = threading.Thread(target=self._beat_forever, name="peers", daemon=True)
        self._heartbeat.start()
        log.info("peer server on %s", self.me.address if self.me else "?")

    async def _start_server(self) -> None:
        # grpcio binds with SO_REUSEPORT by default: two processes could then share a
        # port, and calls meant for one would reach the other.
        server = grpc.aio.server(options=[*_OPTIONS, ("grpc.so_reuseport", 0)])
        server.add_generic_rpc_handlers((_Handlers(self),))
        port = 0
        # A fixed port is the first of a range: each worker of a multi-worker server
        # takes the next free one (a deployment opens the range between its tasks).
        for candidate in range(self._port, self._port + PORT_RANGE) if self._port else [0]:
            try:
                port = server.add_insecure_port(f"{_bracketed(self._bind_host)}:{candidate}")
            except RuntimeError:  # taken
                continue
            break
        if not port:
            raise RuntimeError(f"no free peer port in {self._port}-{self._port + PORT_RANGE - 1}")
        await server.start()
        self._server = server
        self.me = Member(
            secrets.token_hex(6), self._advertise, port, secrets.token_hex(16), self._hostname
        )

    def stop(self) -> None:
        """Leave: delete the membership object, then end the server (calls in
        flight get a few seconds; callers that then fail commit themselves)."""
        self._stop.set()
        if self._heartbeat is not None:
            self._heartbeat.join()
        loop, server, thread = self._loop, self._server, self._thread
        if self.me is not None and thread is not None:
            self._tell_all("Bye", self.me.key.encode(), wait=True, quiet=True)
        self._loop = self._server = self._thread = None  # a second stop does nothing
        if self.me is not None and thread is not None:
            with contextlib.suppress(Exception):
                self._lake.objects.delete(self._uri(self.me.key))
        if loop is not None and server is not None:
            asyncio.run_coroutine_threadsafe(self._shut(server), loop).result()
            loop.call_soon_threadsafe(loop.stop)
        if thread is not None:
            thread.join()

    async def _shut(self, server: grpc.aio.Server) -> None:
        await server.stop(5.0)
        channels = [c for _, c in self._channels.values()]
        self._channels.clear()
        for channel in channels:
            await channel.close()

    # -- membership ------------------------------------------------------------------

    def _uri(self, key: str) -> str:
        return self._lake.uri(PEERS_DIR, key)

    def _beat_forever(self) -> None:
        while not self._stop.wait(self._heartbeat_s):
            try:
                self._beat()
            except Exception:  # the lake is unreachable: keep the last view
                log.warning("peer heartbeat failed", exc_info=True)

    def _beat(self) -> None:
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
            self._call(m, method, body, TELL_TIMEOUT_S, quiet=quiet)
            for m in self._members
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
            self._engine.told(MEMBERS)

    def _reachable(self, member: Member) -> bool:
        """A loopback address means the same machine only."""
        return member.host not in _LOOPBACK or member.hostname == self._hostname

    @property
    def members(self) -> tuple[Member, ...]:
        return self._members

    def owner(self, uid: str) -> Member | None:
        """The process that commits for ``uid``'s tables, or None if it is this one."""
        members = self._members
        if len(members) < 2:
            return None
        best = max(members, key=lambda m: _score(uid, m.id))
        return None if best == self.me else best

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

    # -- calls to the owner ----------------------------------------------------------

    def _call(
        self, member: Member, method: str, body: bytes, timeout_s: float, *, quiet: bool = False
    ) -> Future[bytes]:
        """Call ``member`` from any thread: the call runs on the peer server's loop
        with grpcio's asyncio channel (the blocking channel's ``future()`` started a
        thread per call)."""
        loop = self._loop
        if loop is None:
            stopped: Future[bytes] = Future()
            stopped.set_exception(Unreachable("peering has stopped"))
            return stopped
        return asyncio.run_coroutine_threadsafe(
            self._acall(member, method, body, timeout_s, quiet), loop
        )

    async def _acall(
        self, member: Member, method: str, body: bytes, timeout_s: float, quiet: bool = False
    ) -> bytes:
        known = self._channels.get(member.address)  # only this loop's thread touches it
        if known is None or known[0] != member:
            if known is not None:
                await known[1].close()
            known = (member, grpc.aio.insecure_channel(member.address, options=_CLIENT_OPTIONS))
            self._channels[member.address] = known
        call: Any = known[1].unary_unary(_SERVICE + method)
        try:
            answer: bytes = await call(body, timeout=timeout_s, metadata=((_TOKEN, member.token),))
        except grpc.aio.AioRpcError as exc:
            raise self._failure(member, exc, quiet) from None
        except asyncio.CancelledError as exc:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise  # the caller withdrew the call (``_then``)
            # The call alone was cancelled (its channel closed): not done there.
            raise Unreachable(f"{member.address}: cancelled") from exc
        self._failures.pop(member, None)
        return answer

    def _failure(self, member: Member, exc: grpc.RpcError, quiet: bool = False) -> Exception:
        failed: Any = exc  # a grpc.Call as well as an RpcError
        trailing: dict[str, Any] = dict(failed.trailing_metadata() or ())
        kind = trailing.get(_ERROR)
        details = failed.details() or ""
        if isinstance(kind, str):
            cls = getattr(errors, kind, None)
            if isinstance(cls, type) and issubclass(cls, errors.LakePubSubError):
                return cls(details)
        if failed.code() == grpc.StatusCode.DEADLINE_EXCEEDED:  # it may have done the work
            return errors.Unavailable(f"the topic's owner {member.address} did not answer in time")
        # Refused, reset, the wrong token, or something other than a peer at that
        # address (a proxy answering HTTP/2): the work was not done there.
        self.forget(member, quiet=quiet)
        metrics.PEER_UNREACHABLE.inc()
        return Unreachable(f"{member.address}: {details}")

    def publish(self, member: Member, topic_uid: str, columns: pa.Table) -> Future[int]:
        """Have ``member`` commit ``columns`` to the topic: a future of their first offset."""
        head = orjson.dumps({"topic": topic_uid})
        body = len(head).to_bytes(4, "big") + head + _ipc(columns)
        metrics.PEER_CALLS.labels("publish").inc()
        return _then(
            self._call(member, "Publish", body, CALL_MARGIN_S),
            lambda answer: int(orjson.loads(answer)["first"]),
        )

    def pull(
        self,
        member: Member,
        subscription: str,
        max_messages: int,
        wait_s: float,
        ack_deadline_s: int | None,
    ) -> Future[list[ReceivedMessage]]:
        body = orjson.dumps(
            {
                "subscription": subscription,
                "max_messages": max_messages,
                "wait_s": wait_s,
                "ack_deadline_s": ack_deadline_s,
            }
        )
        metrics.PEER_CALLS.labels("pull").inc()
        name = SubscriptionName.parse(subscription)
        return _then(
            self._call(member, "Pull", body, wait_s + CALL_MARGIN_S),
            _deliveries_from_ipc,
            orphan=lambda got: self._engine.release(name, got),
        )

    def acknowledge(
        self, member: Member, subscription: str, ack_ids: list[str], deadline_s: int | None
    ) -> Future[dict[str, str]]:
        body = orjson.dumps(
            {"subscription": subscription, "ack_ids": ack_ids, "deadline_s": deadline_s}
        )
        metrics.PEER_CALLS.labels("ack").inc()
        return _then(self._call(member, "Ack", body, CALL_MARGIN_S), orjson.loads)


class _Handlers(grpc.GenericRpcHandler):
    """The peer server's methods; bytes in, bytes out."""

    def __init__(self, peering: Peering) -> None:
        self._peering = peering
        self._methods: dict[str, Any] = {
            _SERVICE + "Publish": grpc.unary_unary_rpc_method_handler(self._publish),
            _SERVICE + "Pull": grpc.unary_unary_rpc_method_handler(self._pull),
            _SERVICE + "Ack": grpc.unary_unary_rpc_method_handler(self._ack),
        }
        # Notices: a text body, handled at once, answered with nothing.
        notices: dict[str, Callable[[str], None]] = {
            "Hello": peering.joined,
            "Bye": peering.left,
            "Changed": peering._engine.told,
        }
        for name, handle in notices.items():
            self._methods[_SERVICE + name] = grpc.unary_unary_rpc_method_handler(
                self._notice(handle)
            )

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> Any:
        return self._methods.get(handler_call_details.method)

    async def _answer(self, context: _Context, work: Callable[[], Future[T]]) -> T | None:
        me = self._peering.me
        token = dict(context.invocation_metadata() or ()).get(_TOKEN)
        if me is None or not isinstance(token, str) or not secrets.compare_digest(token, me.token):
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, "not this peer")
        try:
            engine = self._peering._engine
            if engine.lookups_need_no_io():
                future = work()
            else:  # the catalog must be read first: not on this loop
                future = await asyncio.to_thread(work)
            return await asyncio.wrap_future(future)
        except errors.LakePubSubError as exc:
            context.set_trailing_metadata(((_ERROR, type(exc).__name__),))
            await context.abort(grpc.StatusCode.UNKNOWN, str(exc))
        return None

    def _notice(self, handle: Callable[[str], None]) -> Callable[[bytes, _Context], Any]:
        async def notice(body: bytes, context: _Context) -> bytes:
            def work() -> Future[None]:
                handle(body.decode())
                return _done(None)

            await self._answer(context, work)
            return b""

        return notice

    async def _publish(self, body: bytes, context: _Context) -> bytes:
        size = int.from_bytes(body[:4], "big")
        head = orjson.loads(body[4 : 4 + size])
        columns = pa.ipc.open_stream(body[4 + size :]).read_all()
        engine = self._peering._engine
        ids = await self._answer(
            context, lambda: engine.publish_forwarded(str(head["topic"]), columns)
        )
        first = int(ids[0]) if ids else 0
        return orjson.dumps({"first": first})

    async def _pull(self, body: bytes, context: _Context) -> bytes:
        doc = orjson.loads(body)
        name = SubscriptionName.parse(doc["subscription"])
        engine = self._peering._engine
        started: list[Future[list[ReceivedMessage]]] = []

        def pull() -> Future[list[ReceivedMessage]]:
            started.append(
                engine.pull_here(
                    name,
                    max_messages=int(doc["max_messages"]),
                    wait_s=float(doc["wait_s"]),
                    ack_deadline_s=doc["ack_deadline_s"],
                )
            )
            return started[0]

        try:
            got = await self._answer(context, pull)
        except asyncio.CancelledError:  # the caller withdrew its pull
            if started:
                engine.withdraw(name, started[0])
            raise
        return _deliveries_to_ipc(got or [])

    async def _ack(self, body: bytes, context: _Context) -> bytes:
        doc = orjson.loads(body)
        name = SubscriptionName.parse(doc["subscription"])
        engine = self._peering._engine
        failures = await self._answer(
            context, lambda: engine.acknowledge_here(name, list(doc["ack_ids"]), doc["deadline_s"])
        )
        return orjson.dumps(failures or {})


# -- encodings ----------------------------------------------------------------------------


def _ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue())


def _deliveries_to_ipc(items: Iterable[ReceivedMessage]) -> bytes:
    cols: dict[str, list[Any]] = {name: [] for name in _DELIVERIES.names}
    for item in items:
        cols["ack_id"].append(item.ack_id)
        cols["delivery_attempt"].append(item.delivery_attempt)
        m = item.message
        event = item.event
        cols["event"].append(None if event is None else orjson.dumps(event.to_json()).decode())
        cols["offset"].append(None if m is None else m.offset)
        cols["message_id"].append(None if m is None else m.message_id)
        cols["publish_time"].append(None if m is None else m.publish_time_us)
        cols["data"].append(None if m is None else m.data)
        cols["attributes"].append(None if m is None else list(m.attributes.items()))
        cols["ordering_key"].append(None if m is None else m.ordering_key)
        cols["size"].append(None if m is None else m.size)
    return _ipc(pa.table(cols, schema=_DELIVERIES))


def _deliveries_from_ipc(body: bytes) -> list[ReceivedMessage]:
    table = pa.ipc.open_stream(body).read_all()
    new = tuple.__new__
    return [
        new(ReceivedMessage, (ack_id, attempt, message, None))
        if event is None
        else ReceivedMessage(ack_id, attempt, event=TruncationEvent.from_json(orjson.loads(event)))
        for ack_id, attempt, event, message in zip(
            table.column("ack_id").to_pylist(),
            table.column("delivery_attempt").to_pylist(),
            table.column("event").to_pylist(),
            from_arrow(table),
            strict=True,
        )
    ]


def _done(value: T) -> Future[T]:
    future: Future[T] = Future()
    future.set_result(value)
    return future


def _then(
    source: Future[bytes],
    convert: Callable[[bytes], T],
    *,
    orphan: Callable[[T], None] | None = None,
) -> Future[T]:
    """``convert`` of ``source``'s answer. Cancelling the result cancels the call;
    an answer that arrives for a cancelled result goes to ``orphan``."""
    result: Future[T] = Future()

    def done(finished: Future[bytes]) -> None:
        if finished.cancelled():
            result.cancel()
            return
        try:
            value = convert(finished.result())
        except BaseException as exc:
            with contextlib.suppress(InvalidStateError):
                result.set_exception(exc)
            return
        try:
            result.set_result(value)
        except InvalidStateError:
            if orphan is not None:
                orphan(value)

    source.add_done_callback(done)
    result.add_done_callback(lambda r: r.cancelled() and source.cancel())
    return result


def _advertised(bind_host: str) -> str:
    if bind_host in ("0.0.0.0", "::", ""):
        return socket.gethostbyname(socket.gethostname())
    return bind_host


def _bracketed(host: str) -> str:
    return f"[{host}]" if ":" in host else host
