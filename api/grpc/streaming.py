"""StreamingPull: long-lived bidirectional streams over the subscription's dispatcher.

A stream is a loop of long-polling pulls sized by the room its flow control
leaves (``max_outstanding_messages`` / ``max_outstanding_bytes`` of the first
request), each leasing for the stream's ``stream_ack_deadline_seconds``. Pulls,
acks and deadline changes of every stream and every unary call of a
subscription meet in its one dispatcher, which commits each cycle's work as one
lease-table commit. Deliveries leave the stream's room when they are acked,
nacked or expire; acks arrive on the stream or, as Google's clients send them,
through the unary Acknowledge and ModifyAckDeadline calls of this process
(``Streams`` routes those to the stream that delivered the ack id; a process
that never sees them frees the room when the lease expires).

A stream that ends, however it ends, withdraws its waiting pull from the
dispatcher and releases what it was given but never wrote to the client
(``Engine.withdraw``, ``Engine.release``): those messages are deliverable again
at once. What it wrote and the client did not settle follows the client's own
protocol (Google's clients nack what they hold when they shut down cleanly; a
vanished client's leases run out).

Keepalive: a client that opens the stream with ``protocol_version`` 1 or more
(Google's Go and Java clients) sends an empty request about every 30 s and closes
a stream that answers nothing within 15-20 s; each such ping is answered with an
empty response, as Pub/Sub does.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Sequence
from concurrent.futures import Future
from typing import Any

import grpc
from google.pubsub_v1.types import pubsub as ps

from api import answers
from api.grpc import encode, encode_columns
from api.grpc.door import GRPC_REQUESTS, Call, GrpcDoor, abort, failure_of, parse
from api.grpc.streams import Lot, deliveries_of
from api.grpc.wire import serialized, subscription_name
from api.pulls import start_pull
from lakepubsub import Engine, SubscriptionName, constants, errors
from lakepubsub.delivery.ackids import split_malformed
from lakepubsub.messages import Received, ReceivedMessage

log = logging.getLogger(__name__)

StreamingPullRequest: Any = ps.StreamingPullRequest.pb()
StreamingPullResponse: Any = ps.StreamingPullResponse.pb()

# A stream whose room is used up rechecks for expired leases this often.
ROOM_RECHECK_S = 1.0
# One pull of a stream leases at most this many messages (one dispatcher cycle);
# they leave in responses of at most MAX_PULL_MESSAGES (about 1 MiB of 1 KiB
# messages, under every client's default receive limit of 4 MiB).
STREAM_PULL_MESSAGES = 5_000
# Without a limit from the client, at most this many deliveries are out per stream
# (Google's clients ask for 1,000 by default).
DEFAULT_MAX_OUTSTANDING = 10_000
# Clients that open a stream with this protocol_version or later expect an answer
# to their keepalive pings (empty requests).
PING_PROTOCOL_VERSION = 1


class Stream:
    """One StreamingPull call."""

    def __init__(self, door: GrpcDoor, context: Any, first: Any, sub: Any) -> None:
        self.door = door
        self.context = context
        self.attempts = sub.reports_delivery_attempts  # whether delivery_attempt is sent
        self.name = subscription_name(first.subscription)
        self.exactly_once = bool(sub.enable_exactly_once_delivery)
        self.ordering = bool(sub.enable_message_ordering)
        self._properties = encode.subscription_properties(
            exactly_once=self.exactly_once, ordering=self.ordering
        )
        self.deadline_s = _deadline(first.stream_ack_deadline_seconds)
        # How long the stream's leases last: the client's latest deadline change,
        # which Google's clients send for every message on receipt (their own ack
        # deadline, not the stream's); until one arrives, the stream's deadline.
        # Leasing for what the receipt change will ask lets the dispatcher skip
        # writing it (leases.LEASE_SLACK_US).
        self.lease_s: int | None = None
        self.max_messages: int = first.max_outstanding_messages
        if self.max_messages <= 0:
            self.max_messages = DEFAULT_MAX_OUTSTANDING
        self.max_bytes = max(0, first.max_outstanding_bytes)
        # The answers the stream holds (``Lot``: its room until acked, nacked or
        # their leases end, on time.monotonic(); a lease ends by then plus the slack,
        # the pull's answer came later than the dispatcher's plan), and their sum.
        self.lots: set[Lot] = set()
        self.out_count = 0
        self.out_bytes = 0
        # No lot ends before this (a lower bound), so ``room`` looks for ended ones
        # only once it has passed.
        self._soonest = float("inf")
        self.room_changed = asyncio.Event()
        self._write_lock = asyncio.Lock()
        self.answers_pings = first.protocol_version >= PING_PROTOCOL_VERSION
        # The dispatcher's answer to the pull under way, until the stream takes it,
        # and deliveries taken but not yet written: what the stream gives back if it
        # ends first.
        self._pending: Future[Sequence[ReceivedMessage]] | None = None
        self._unsent: Sequence[ReceivedMessage] = []

    # -- flow control -----------------------------------------------------------------------

    def freed(self, lot: Lot, count: int, size: int) -> None:
        """``count`` deliveries of ``lot`` (``size`` bytes) left the room."""
        self.out_count -= count
        self.out_bytes -= size
        if lot.left <= 0:
            self.lots.discard(lot)
        self.room_changed.set()

    def held_until(self, until: float) -> None:
        """A lot's room is now held until ``until`` (a deadline change)."""
        self._soonest = min(self._soonest, until)

    def _lease_s(self) -> int:
        return self.lease_s or self.deadline_s

    def room(self) -> int:
        """How many messages the stream may be sent now (0: wait for acks)."""
        now = time.monotonic()
        if now >= self._soonest:
            self.door.streams.expired(*[lot for lot in self.lots if lot.until <= now])
            self._soonest = min((lot.until for lot in self.lots), default=float("inf"))
        if self.max_bytes and self.out_bytes >= self.max_bytes:
            return 0
        return max(0, min(self.max_messages - self.out_count, STREAM_PULL_MESSAGES))

    def _next_expiry_s(self) -> float:
        return max(0.01, min(ROOM_RECHECK_S, self._soonest - time.monotonic()))

    # -- the stream ---------------------------------------------------------------------------

    async def run(self, requests: AsyncIterator[Any], first: Any) -> None:
        await self._client_request(first)
        reader = asyncio.create_task(self._read(requests))
        closing = asyncio.create_task(self.door.closing.wait())  # type: ignore[union-attr]
        # Every task this loop starts is cancelled when it ends, however it ends (a
        # client that goes away cancels the handler while it waits on them).
        waiting: set[asyncio.Future[Any]] = {reader, closing}
        # The pull under way, if any. The next pull starts as soon as the last one
        # answered, before its messages are written: the dispatcher plans and
        # commits the next batch while this one is serialized and sent.
        pulled: asyncio.Future[Any] | None = None
        try:
            while not reader.done():
                if closing.done():
                    raise errors.Unavailable("the server is shutting down; reconnect")
                if pulled is None:
                    room = self.room()
                    if room <= 0:
                        self.room_changed.clear()
                        waiter = asyncio.ensure_future(self.room_changed.wait())
                        waiting.add(waiter)
                        await asyncio.wait(
                            {waiter, reader, closing},
                            timeout=self._next_expiry_s(),
                            return_when=asyncio.FIRST_COMPLETED,
                        )
                        waiter.cancel()
                        waiting.discard(waiter)
                        continue
                    pulled = asyncio.ensure_future(self._pull(room))
                    waiting.add(pulled)
                await asyncio.wait({pulled, reader, closing}, return_when=asyncio.FIRST_COMPLETED)
                if not pulled.done():
                    continue  # the loop ends, or ends the stream; the pull is cancelled then
                waiting.discard(pulled)
                received, lease_s, started = pulled.result()
                pulled, self._pending, self._unsent = None, None, received
                if not received:
                    continue
                self._record(received, lease_s, started)
                room = self.room()
                if room > 0:
                    pulled = asyncio.ensure_future(self._pull(room))
                    waiting.add(pulled)
                await self._send(received)
            reader.result()  # the client's request stream ended: re-raise a failure
        finally:
            for task in waiting:
                task.cancel()
            self._give_back()
            self.door.streams.forget(*self.lots)

    def _give_back(self) -> None:
        """The stream ended: withdraw its pull, release what it never wrote."""
        engine, pending, unsent = self.door.engine, self._pending, self._unsent
        self._pending, self._unsent = None, []
        if unsent:
            self.door.streams.settled_deliveries(*deliveries_of(Received.of(unsent)))
        if pending is None and not unsent:
            return
        if engine.lookups_need_no_io():
            _withdraw_and_release(engine, self.name, pending, unsent)
        else:  # the catalog must be read: not on the event loop
            asyncio.get_running_loop().run_in_executor(
                None, _withdraw_and_release, engine, self.name, pending, unsent
            )

    async def _pull(self, room: int) -> tuple[Sequence[ReceivedMessage], int, float]:
        """Deliveries, their lease, and when the pull started (time.monotonic())."""
        lease_s = self._lease_s()
        started = time.monotonic()
        future = await start_pull(
            self.door.engine, self.name, max_messages=room, ack_deadline_s=lease_s
        )
        self._pending = future
        return await answers.of(future), lease_s, started

    def _record(self, received: Sequence[ReceivedMessage], lease_s: int, started: float) -> None:
        """Deliveries take the stream's room from now until acked, nacked or expired."""
        until = time.monotonic() + lease_s
        self._soonest = min(self._soonest, until)
        delivered = Received.of(received)
        size, (tag, deliveries) = delivered.size(), deliveries_of(delivered)
        lease = None if self.exactly_once else (lease_s, started)
        lot = Lot(self, tag, deliveries, size, until, lease)
        self.door.streams.delivered(lot)
        self.lots.add(lot)
        self.out_count += lot.left
        self.out_bytes += size

    async def _send(self, received: Sequence[ReceivedMessage]) -> None:
        for sent, response in encode_columns.responses(
            received,
            limit=constants.MAX_PULL_MESSAGES,
            attempts=self.attempts,
            then=self._properties,
        ):
            await self._write(response)
            self._unsent = received[sent:]

    async def _write(self, response: Any) -> None:
        """Write a response: deliveries already encoded (with the subscription's
        properties), or a protobuf message, which gets them here."""
        if not isinstance(response, bytes):
            props = response.subscription_properties
            props.exactly_once_delivery_enabled = self.exactly_once
            props.message_ordering_enabled = self.ordering
        async with self._write_lock:
            await self.context.write(response)

    async def _read(self, requests: AsyncIterator[Any]) -> None:
        async for request in requests:
            if self.answers_pings and not (request.ack_ids or request.modify_deadline_ack_ids):
                await self._write(StreamingPullResponse())  # a keepalive ping: pong
            await self._client_request(request)

    async def _client_request(self, request: Any) -> None:
        """Acks, deadline changes and a new stream deadline sent on the stream."""
        if request.stream_ack_deadline_seconds:
            self.deadline_s = _deadline(request.stream_ack_deadline_seconds)
        if len(request.modify_deadline_seconds) != len(request.modify_deadline_ack_ids):
            raise errors.InvalidArgument(
                "modify_deadline_seconds and modify_deadline_ack_ids must have the same length"
            )
        if request.ack_ids:
            await self._settle(list(request.ack_ids), None)
        by_seconds: dict[int, list[str]] = {}
        for seconds, ack_id in zip(
            request.modify_deadline_seconds, request.modify_deadline_ack_ids, strict=True
        ):
            by_seconds.setdefault(seconds, []).append(ack_id)
        for seconds, ack_ids in by_seconds.items():
            await self._settle(ack_ids, seconds)

    async def _settle(self, ack_ids: list[str], seconds: int | None) -> None:
        streams = self.door.streams
        # Parsed once, for the engine and the room. A malformed id fails alone, as on
        # every door (ackids.split_malformed).
        split = split_malformed(ack_ids)
        if seconds is not None:  # never with exactly-once: every id is confirmed below
            rest = streams.changing(self.name, split, seconds)
            if rest is not split:  # some answered here
                if not rest.ids and not rest.malformed:
                    return
                split, ack_ids = rest, [*rest.ids, *rest.malformed]
        engine = self.door.engine
        if seconds is None:
            future = engine.acknowledge_future(self.name, ack_ids, split)
        else:
            future = engine.modify_ack_deadline_future(self.name, ack_ids, seconds, split)
        if seconds is None:  # the room frees now: the next pull can join the ack's commit
            streams.settled(split.parsed)
        failures = await answers.of(future)
        if seconds is not None:
            streams.extended(split, seconds, failures)
        if self.exactly_once:
            await self._confirm(ack_ids, failures, seconds)

    async def _confirm(
        self, ack_ids: list[str], failures: dict[str, str], seconds: int | None
    ) -> None:
        """Exactly-once: tell the client which acks or deadline changes took."""
        done = [a for a in ack_ids if a not in failures]
        invalid = [a for a, reason in failures.items() if reason.startswith("PERMANENT")]
        temporary = [a for a, reason in failures.items() if not reason.startswith("PERMANENT")]
        response = StreamingPullResponse()
        if seconds is None:
            confirmation = response.acknowledge_confirmation
            confirmation.temporary_failed_ack_ids.extend(temporary)
        else:
            confirmation = response.modify_ack_deadline_confirmation
            confirmation.temporary_failed_ack_ids.extend(temporary)
        confirmation.ack_ids.extend(done)
        confirmation.invalid_ack_ids.extend(invalid)
        await self._write(response)


def _withdraw_and_release(
    engine: Engine,
    name: SubscriptionName,
    pending: Future[Sequence[ReceivedMessage]] | None,
    unsent: Sequence[ReceivedMessage],
) -> None:
    if pending is not None:
        engine.withdraw(name, pending)
    engine.release(name, unsent)


def _deadline(seconds: int) -> int:
    if not constants.MIN_ACK_DEADLINE_S <= seconds <= constants.MAX_ACK_DEADLINE_S:
        raise errors.InvalidArgument(
            f"Invalid stream_ack_deadline_seconds {seconds}: must be between "
            f"{constants.MIN_ACK_DEADLINE_S} and {constants.MAX_ACK_DEADLINE_S}"
        )
    return seconds


def streaming_pull_handler(door: GrpcDoor) -> grpc.RpcMethodHandler[Any, Any]:
    method = "google.pubsub.v1.Subscriber/StreamingPull"

    async def requests_of(raw: AsyncIterator[bytes]) -> AsyncIterator[Any]:
        async for chunk in raw:
            yield parse(StreamingPullRequest, chunk)

    async def behavior(raw: AsyncIterator[bytes], context: Any) -> None:
        requests = requests_of(raw)
        try:
            first = await anext(requests, None)
            if first is None:
                return
            if not first.subscription:
                raise errors.InvalidArgument("the first request must name a subscription")
            stream_call: Call = Call(door, context)
            name = subscription_name(first.subscription)
            await stream_call.check("pull", {"project": name.project, "subscription": name.id})
            sub = await asyncio.to_thread(door.engine.get_subscription, name)
            if sub.detached:
                raise errors.FailedPrecondition(f"Subscription is detached: {name}")
            await Stream(door, context, first, sub).run(requests, first)
        except asyncio.CancelledError:  # the client went away
            GRPC_REQUESTS.labels(method, "CANCELLED").inc()
            raise
        except Exception as exc:
            failure = failure_of(exc, method)
            GRPC_REQUESTS.labels(method, failure.status).inc()
            await abort(context, failure)
        GRPC_REQUESTS.labels(method, "OK").inc()

    return grpc.stream_stream_rpc_method_handler(behavior, response_serializer=serialized)
