"""The push dispatcher: delivers every push subscription's messages to its endpoint.

One ``PushService`` per process runs an asyncio loop in a background thread.
It rereads the catalog every ``refresh_s`` and keeps one ``SubscriptionPusher``
per push subscription. A pusher pulls through the engine, exactly as a pull
client does, so everything pull guarantees holds for push too: a leased
message is not handed to another dispatcher (in this or any other process)
while its lease is live; ordering keys, filters, retry and dead-letter
policies apply; nothing is lost if the process dies (unacknowledged leases
expire and the messages go out again). Delivery is at least once: an endpoint
must tolerate duplicates.

Each delivery's outcome feeds the pusher's flow control (``flow.py``) and is
acknowledged or nacked through the engine in batches.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Coroutine, Sequence
from functools import partial
from typing import Any

from prometheus_client import Counter, Histogram

from lakepubsub import Engine, errors
from lakepubsub.messages import ReceivedMessage
from lakepubsub.push import envelope
from lakepubsub.push.endpoints import Sender
from lakepubsub.push.flow import FlowControl, Outcome, Ticket
from lakepubsub.push.oidc import Signer, generate_pem
from lakepubsub.push.safety import Endpoint, UnsafeEndpoint, parse_endpoint
from lakepubsub.resources.subscriptions import Subscription
from lakepubsub.settings.push import PushSettings

log = logging.getLogger(__name__)

# A push must finish this long before its lease ends, so that the ack commits
# while the lease is still ours.
LEASE_MARGIN_S = 1.0
# A delivery whose lease has less than this left is released instead of sent.
MIN_PUSH_TIME_S = 1.0
# After a failed pull or ack (storage unavailable), wait this long before retrying.
ERROR_PAUSE_S = 1.0
# On shutdown, in-flight pushes get this long to finish; the rest are nacked.
STOP_GRACE_S = 10.0
# Leases released on shutdown are committed within this.
FLUSH_TIMEOUT_S = 10.0
# Warnings about an endpoint that keeps failing are logged at most this often.
WARN_INTERVAL_S = 60.0
# While deliveries are in flight, a pull waits (at most PULL_LINGER_S) until this
# share of the window is free: every pull is a lease commit, so one pull per
# finished delivery would cost a commit per message.
PULL_BATCH_SHARE = 0.5
PULL_LINGER_S = 0.05

PUSHES = Counter("lakepubsub_push_requests_total", "Push requests by outcome", ["outcome"])
PUSH_SECONDS = Histogram(
    "lakepubsub_push_request_seconds",
    "Push request latency",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)


def make_signer(settings: PushSettings) -> Signer:
    """The configured signing key, or a new one that lives as long as this process."""
    pem = settings.signing_key_pem or generate_pem()
    return Signer.from_pem(pem, issuer=settings.issuer, lifetime_s=settings.token_lifetime_s)


class PushService:
    """Push delivery for every push subscription on the engine's lake."""

    def __init__(
        self,
        engine: Engine,
        settings: PushSettings | None = None,
        *,
        signer: Signer | None = None,
    ) -> None:
        self.engine = engine
        self.settings = settings or PushSettings.from_env()
        self.signer = signer or make_signer(self.settings)
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._started = threading.Event()
        self._pushers: dict[str, SubscriptionPusher] = {}
        self._key_published_at = -float("inf")
        self.sender: Sender | None = None

    # -- lifecycle (any thread) -----------------------------------------------------------

    def start(self) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="push-dispatcher", daemon=True)
        self._thread.start()
        self._started.wait()

    def stop(self, timeout_s: float = STOP_GRACE_S + FLUSH_TIMEOUT_S) -> None:
        """Stop pulling, let in-flight pushes finish (briefly), settle their outcomes."""
        loop, stopping, thread = self._loop, self._stopping, self._thread
        if loop is None or stopping is None or thread is None:
            return
        with contextlib.suppress(RuntimeError):  # the loop already ended
            loop.call_soon_threadsafe(stopping.set)
        thread.join(timeout_s)
        if thread.is_alive():
            log.warning("push dispatcher did not stop within %.0f s", timeout_s)

    def subscriptions(self) -> list[str]:
        """Names of the subscriptions this process is pushing (for tests and operators)."""
        return sorted(p.sub.name.path for p in list(self._pushers.values()))

    # -- the loop -------------------------------------------------------------------------

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._main())
        except Exception:
            log.exception("push dispatcher crashed")
        finally:
            self._started.set()
            loop.close()

    async def _main(self) -> None:
        self._stopping = asyncio.Event()
        self.sender = Sender(self.settings)
        self._started.set()
        tasks: dict[str, asyncio.Task[None]] = {}
        try:
            while not self._stopping.is_set():
                await self._publish_key()
                subs = await self._push_subscriptions()
                if subs is not None:
                    self._reconcile(subs, tasks)
                for uid in [uid for uid, task in tasks.items() if task.done()]:
                    del tasks[uid]
                    self._pushers.pop(uid, None)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stopping.wait(), self.settings.refresh_s)
        finally:
            for pusher in self._pushers.values():
                pusher.stop()
            if tasks:
                await asyncio.wait(tasks.values(), timeout=STOP_GRACE_S + FLUSH_TIMEOUT_S)
            for task in tasks.values():
                task.cancel()
            await asyncio.gather(*tasks.values(), return_exceptions=True)
            await self.sender.aclose()

    async def _push_subscriptions(self) -> dict[str, Subscription] | None:
        try:
            # The cached catalog: fresh each ``catalog_staleness()`` (and when a
            # peer commits a change), not each refresh, which on S3 cost a LIST and
            # a GET a second with no push subscription at all.
            subs = await asyncio.to_thread(partial(self.engine.all_subscriptions, fresh=False))
        except errors.LakePubSubError as exc:
            log.warning("push: cannot read the catalog: %s", exc.message)
            return None
        return {s.uid: s for s in subs if s.push_config.is_push and not s.detached}

    def _reconcile(
        self, subs: dict[str, Subscription], tasks: dict[str, asyncio.Task[None]]
    ) -> None:
        for uid, pusher in list(self._pushers.items()):
            current = subs.get(uid)
            if current is None:
                pusher.stop()  # deleted, detached, or switched to pull
            else:
                pusher.update(current)
        for uid, sub in subs.items():
            if uid not in self._pushers:
                assert self.sender is not None
                pusher = SubscriptionPusher(self, sub, self.sender)
                self._pushers[uid] = pusher
                tasks[uid] = asyncio.create_task(pusher.run(), name=f"push-{sub.name.id}")

    async def _publish_key(self) -> None:
        now = time.monotonic()
        if now - self._key_published_at < self.signer.lifetime_s / 2:
            return
        try:
            await asyncio.to_thread(
                self.signer.publish, self.engine.catalog, self.engine.settings.clock_us()
            )
            self._key_published_at = now
        except errors.LakePubSubError as exc:
            log.warning("push: cannot publish the token signing key: %s", exc.message)


class SubscriptionPusher:
    """Pushes one subscription's messages; owns its flow control."""

    def __init__(self, service: PushService, sub: Subscription, sender: Sender) -> None:
        self.sub = sub
        self._service = service
        self._engine = service.engine
        self._sender = sender
        self.flow = self._new_flow()
        self._stopped = False
        self._drained = False  # stopped, and every delivery has an outcome
        self._wake = asyncio.Event()
        self._settle = asyncio.Event()
        self._acks: list[str] = []
        self._nacks: list[str] = []
        self._deliveries: set[asyncio.Task[None]] = set()
        self._pull: asyncio.Future[Sequence[ReceivedMessage]] | None = None
        self._warned_at = -float("inf")

    def update(self, sub: Subscription) -> None:
        """A newer configuration; a new endpoint starts with fresh flow control."""
        if sub.push_config.push_endpoint != self.sub.push_config.push_endpoint:
            self.flow = self._new_flow()
            self._wake.set()
        self.sub = sub

    def _new_flow(self) -> FlowControl:
        settings = self._service.settings
        return FlowControl(
            min_backoff_s=settings.min_backoff_s,
            max_backoff_s=settings.max_backoff_s,
            initial_window=settings.initial_window,
            max_outstanding=settings.max_outstanding,
        )

    def stop(self) -> None:
        self._stopped = True
        self._wake.set()
        if self._pull is not None:
            self._pull.cancel()

    # -- the pull/dispatch loop ---------------------------------------------------------

    async def run(self) -> None:
        settler = asyncio.create_task(self._settle_loop())
        try:
            await self._dispatch_loop()
        finally:
            if self._deliveries:
                _, late = await asyncio.wait(self._deliveries, timeout=STOP_GRACE_S)
                for task in late:
                    task.cancel()
                await asyncio.gather(*late, return_exceptions=True)
            self._stopped = True
            self._drained = True
            self._settle.set()
            await asyncio.gather(settler, return_exceptions=True)

    async def _dispatch_loop(self) -> None:
        lingering_since: float | None = None
        while not self._stopped:
            endpoint = self._endpoint()
            now = time.monotonic()
            slots = self.flow.slots(now)
            if endpoint is not None:
                slots = min(slots, self._sender.available(endpoint.origin))
            if slots <= 0:
                self._wake.clear()
                wait = self.flow.wait_s(now)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), wait if wait > 0 else None)
                continue
            if self.flow.in_flight and slots < self.flow.window.limit * PULL_BATCH_SHARE:
                lingering_since = lingering_since or now
                if now - lingering_since < PULL_LINGER_S:
                    await self._sleep(PULL_LINGER_S - (now - lingering_since))
                    continue
            lingering_since = None
            try:
                received = await self._pull_messages(slots)
            except asyncio.CancelledError:
                if self._stopped:
                    return
                raise
            except errors.NotFound:
                return  # the subscription was deleted
            except errors.LakePubSubError as exc:
                self._warn("pull failed: %s", exc.message)
                await self._sleep(ERROR_PAUSE_S)
                continue
            pulled_at = time.monotonic()
            if self._stopped or not self.sub.push_config.is_push:
                self._release(received)
                continue
            for group in _in_order(received, self.sub.enable_message_ordering):
                # The first push's ticket now, before the next pull sizes itself.
                flow = self.flow
                ticket = flow.dispatch(pulled_at)
                task = asyncio.create_task(self._deliver_group(group, flow, ticket, pulled_at))
                self._deliveries.add(task)
                task.add_done_callback(self._deliveries.discard)

    async def _pull_messages(self, count: int) -> list[ReceivedMessage]:
        future = await asyncio.to_thread(
            self._engine.pull_future, self.sub.name, max_messages=count, return_immediately=False
        )
        self._pull = asyncio.wrap_future(future)
        if self._stopped:
            self._pull.cancel()
        try:
            return list(await self._pull)
        finally:
            self._pull = None

    def _endpoint(self) -> Endpoint | None:
        try:
            return parse_endpoint(self.sub.push_config.push_endpoint)
        except UnsafeEndpoint:
            return None

    # -- one delivery ---------------------------------------------------------------------

    async def _deliver_group(
        self, group: list[ReceivedMessage], flow: FlowControl, ticket: Ticket, pulled_at: float
    ) -> None:
        """Push one message, or an ordering key's messages one at a time, in order: once
        one is not acknowledged, the rest are nacked unpushed and go again after it."""
        for at, item in enumerate(group):
            if at:
                flow = self.flow
                ticket = flow.dispatch(pulled_at)
            outcome = await self._deliver(item, flow, ticket, pulled_at)
            if outcome is not Outcome.ACK:
                self._nacks.extend(r.ack_id for r in group[at + 1 :])
                return

    async def _deliver(
        self, item: ReceivedMessage, flow: FlowControl, ticket: Ticket, pulled_at: float
    ) -> Outcome:
        sub = self.sub
        outcome = Outcome.NACK
        try:
            remaining = sub.ack_deadline_s - LEASE_MARGIN_S - (time.monotonic() - pulled_at)
            if remaining < MIN_PUSH_TIME_S:
                flow.cancel(ticket)
                self._nacks.append(item.ack_id)
                return outcome
            try:
                endpoint = parse_endpoint(sub.push_config.push_endpoint)
            except UnsafeEndpoint as exc:
                self._warn("endpoint refused: %s", exc.message)
                flow.record(ticket, Outcome.NACK, time.monotonic())
                self._nacks.append(item.ack_id)
                return outcome
            request = envelope.build(sub, item)
            started = time.monotonic()
            result = await self._sender.send(
                endpoint,
                request,
                authorization=self._authorization(sub),
                timeout_s=remaining,
            )
            PUSH_SECONDS.observe(time.monotonic() - started)
            outcome = result.outcome
            if result.unsafe or (result.status is None and outcome is not Outcome.ACK):
                self._warn("push to %s failed: %s", sub.push_config.push_endpoint, result.error)
            flow.record(ticket, outcome, time.monotonic())
            PUSHES.labels(outcome.value).inc()
            (self._acks if outcome is Outcome.ACK else self._nacks).append(item.ack_id)
        except asyncio.CancelledError:
            self._nacks.append(item.ack_id)  # shutting down: release it for redelivery
            raise
        finally:
            self._settle.set()
            self._wake.set()
        return outcome

    def _authorization(self, sub: Subscription) -> str | None:
        oidc = sub.push_config.oidc_token
        if oidc is not None and oidc.service_account_email:
            audience = oidc.audience or sub.push_config.push_endpoint
            token = self._service.signer.token(email=oidc.service_account_email, audience=audience)
            return f"Bearer {token}"
        return self._service.settings.authorization_for(sub.push_config.push_endpoint)

    # -- settling outcomes ----------------------------------------------------------------

    def _release(self, received: list[ReceivedMessage]) -> None:
        self._nacks.extend(r.ack_id for r in received)
        self._settle.set()

    async def _settle_loop(self) -> None:
        """Acknowledge and nack outcomes in batches: one engine request each per round."""
        while True:
            await self._settle.wait()
            self._settle.clear()
            acks, self._acks = self._acks, []
            nacks, self._nacks = self._nacks, []
            pending: list[Coroutine[Any, Any, None]] = []
            if acks:
                pending.append(self._submit(acks, ack=True))
            if nacks:
                pending.append(self._submit(nacks, ack=False))
            if pending:
                await asyncio.gather(*pending)
            if self._drained and not self._acks and not self._nacks:
                return

    async def _submit(self, ack_ids: list[str], *, ack: bool) -> None:
        engine, name = self._engine, self.sub.name
        try:
            if ack:
                future = await asyncio.to_thread(engine.acknowledge_future, name, ack_ids)
            else:
                future = await asyncio.to_thread(
                    engine.modify_ack_deadline_future, name, ack_ids, 0
                )
            await asyncio.wait_for(asyncio.wrap_future(future), FLUSH_TIMEOUT_S)
        except (errors.LakePubSubError, TimeoutError) as exc:
            # The leases expire and the messages go out again: at least once.
            message = exc.message if isinstance(exc, errors.LakePubSubError) else "timed out"
            self._warn("settling %d deliveries failed: %s", len(ack_ids), message)

    # -- helpers --------------------------------------------------------------------------

    async def _sleep(self, seconds: float) -> None:
        self._wake.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), seconds)

    def _warn(self, message: str, *args: object) -> None:
        now = time.monotonic()
        if now - self._warned_at >= WARN_INTERVAL_S:
            self._warned_at = now
            log.warning("push %s: " + message, self.sub.name.path, *args)


def _in_order(received: list[ReceivedMessage], ordering: bool) -> list[list[ReceivedMessage]]:
    """Deliveries in push groups: each alone, or with ordering, an ordering key's
    messages together, in the order they came (offset order)."""
    if not ordering:
        return [[r] for r in received]
    groups: list[list[ReceivedMessage]] = []
    by_key: dict[str, list[ReceivedMessage]] = {}
    for r in received:
        key = r.message.ordering_key if r.message is not None else ""
        if not key:
            groups.append([r])
        elif key in by_key:
            by_key[key].append(r)
        else:
            by_key[key] = [r]
            groups.append(by_key[key])
    return groups
