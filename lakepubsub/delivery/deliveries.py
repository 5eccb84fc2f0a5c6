"""This process's dispatchers, one per subscription it serves, made on first use, and
the routing of pulls and ack changes: to the topic's owner (another process,
through ``lakepubsub/peering/routing.py``) or to the dispatcher here."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any

from lakepubsub import constants, errors
from lakepubsub.delivery import leases, requests
from lakepubsub.delivery.ackids import AckId, parse_all
from lakepubsub.delivery.context import DeliveryContext
from lakepubsub.delivery.dispatcher import Dispatcher
from lakepubsub.messages import Pull, Received, ReceivedMessage, TruncationEvent
from lakepubsub.peering.routing import Route, via_owner
from lakepubsub.resources.directory import Directory
from lakepubsub.resources.names import SubscriptionName
from lakepubsub.resources.subscriptions import Subscription
from lakepubsub.workers import Workers

log = logging.getLogger(__name__)


class Deliveries:
    """The subscriptions' dispatchers in this process. Thread-safe."""

    def __init__(
        self,
        context: DeliveryContext,
        directory: Directory,
        owner: Callable[[str], Route | None],
    ) -> None:
        self._context = context
        self._directory = directory
        self._owner = owner
        self._dispatchers: Workers[Dispatcher] = Workers()

    # -- the dispatchers -------------------------------------------------------------------

    def _dispatcher(self, name: SubscriptionName) -> Dispatcher:
        sub = self._directory.subscription(name, fresh=False)
        return self._dispatchers.get(
            sub.uid,
            lambda: Dispatcher(
                self._context,
                sub,
                lookup=lambda: self._directory.lookup_uid(sub.name, sub.uid),
                on_exit=self._exited,
            ),
            usable=lambda dispatcher: dispatcher.alive,
        )

    def _exited(self, dispatcher: Dispatcher) -> None:
        self._dispatchers.remove(dispatcher.subscription.uid, dispatcher)

    def submit(self, name: SubscriptionName, make: Callable[[], requests.Request]) -> Future[Any]:
        """Queue a request on the subscription's dispatcher here; its future."""
        for _ in range(3):
            request = make()
            try:
                self._dispatcher(name).submit(request)
            except errors.Unavailable:
                if self._dispatchers.closed:
                    raise
                continue  # the dispatcher exited just now; start another
            return request.future
        raise errors.Unavailable("could not reach the subscription's dispatcher; retry")

    def nudge(self, topic_uid: str, version: int) -> None:
        """The topic's messages table got ``version``: its waiting pulls look."""
        waiting = [d for d in self._dispatchers.all() if d.subscription.topic_uid == topic_uid]
        for dispatcher in waiting:
            dispatcher.nudge(version)

    def flush_all(self) -> None:
        """Commit the lease changes every dispatcher holds in memory."""
        for dispatcher in self._dispatchers.all():
            with contextlib.suppress(errors.Unavailable):  # stopping: it commits anyway
                dispatcher.submit(requests.FlushRequest())

    def forget(self, uid: str, reason: errors.LakePubSubError) -> None:
        """The subscription (or its topic) was deleted: its dispatcher stops."""
        dispatcher = self._dispatchers.remove(uid)
        if dispatcher is not None:
            dispatcher.stop(reason)

    def shut(self) -> list[Dispatcher]:
        """Take no more requests; the dispatchers to stop (``stop_all``)."""
        return self._dispatchers.shut()

    @staticmethod
    def stop_all(dispatchers: list[Dispatcher]) -> None:
        for dispatcher in dispatchers:
            dispatcher.stop()
        for dispatcher in dispatchers:
            dispatcher.join(constants.CLOSE_WAIT_S)

    # -- pulls -----------------------------------------------------------------------------

    def pull(
        self,
        name: SubscriptionName,
        *,
        max_messages: int,
        return_immediately: bool,
        ack_deadline_s: int | None,
    ) -> Future[Sequence[ReceivedMessage]]:
        """A checked pull, at the topic's owner or here (``Engine.pull_future``)."""
        if max_messages <= 0:
            raise errors.InvalidArgument("maxMessages must be a positive number")
        sub = self._directory.subscription(name, fresh=False)
        if sub.detached:
            raise errors.FailedPrecondition(f"Subscription is detached: {name}")
        if ack_deadline_s is not None and not (
            constants.MIN_ACK_DEADLINE_S <= ack_deadline_s <= constants.MAX_ACK_DEADLINE_S
        ):
            raise errors.InvalidArgument(
                f"the ack deadline must be between {constants.MIN_ACK_DEADLINE_S} and "
                f"{constants.MAX_ACK_DEADLINE_S} seconds"
            )
        pull = Pull(
            min(max_messages, constants.MAX_PULL_MESSAGES),
            0.0 if return_immediately else self._context.settings.pull_wait_s,
            ack_deadline_s,
        )
        return via_owner(
            self._owner(sub.topic_uid),
            lambda peering, member: peering.pull(member, name.path, pull),
            lambda: self.pull_here(name, pull),
            withdraw=lambda source: self.withdraw(name, source),
        )

    def pull_here(self, name: SubscriptionName, pull: Pull) -> Future[Sequence[ReceivedMessage]]:
        return self.submit(name, lambda: requests.PullRequest.of(pull))

    def withdraw(self, name: SubscriptionName, pull: Future[Sequence[ReceivedMessage]]) -> None:
        if pull.cancel():
            return
        pull.add_done_callback(lambda done: self._release_result(name, done))

    def _release_result(
        self, name: SubscriptionName, done: Future[Sequence[ReceivedMessage]]
    ) -> None:
        if not done.cancelled() and done.exception() is None:
            self.release(name, done.result())

    def release(self, name: SubscriptionName, received: Sequence[ReceivedMessage]) -> None:
        ack_ids = Received.of(received).ack_ids()
        if not ack_ids:
            return
        try:
            future = self.changes(name, ack_ids, parse_all(ack_ids), leases.RELEASE)
        except errors.LakePubSubError as exc:
            log.info("could not release %d deliveries of %s: %s", len(ack_ids), name, exc)
            return
        future.add_done_callback(lambda f: _log_release_failure(name, f))

    # -- acks, deadline changes, truncations, seeks ----------------------------------------

    def changes(
        self,
        name: SubscriptionName,
        ack_ids: list[str],
        parsed: Sequence[AckId],
        deadline_s: int | None,
    ) -> Future[dict[str, str]]:
        """Acks (``deadline_s`` None) or deadline changes, at the topic's owner or here."""
        sub = self._directory.subscription(name, fresh=False)
        return via_owner(
            self._owner(sub.topic_uid),
            lambda peering, member: peering.acknowledge(member, name.path, ack_ids, deadline_s),
            lambda: self.submit(name, lambda: requests.AckRequest(parsed, deadline_s)),
        )

    def acknowledge_here(
        self, name: SubscriptionName, ack_ids: list[str], deadline_s: int | None
    ) -> Future[dict[str, str]]:
        parsed = parse_all(ack_ids)
        return self.submit(name, lambda: requests.AckRequest(parsed, deadline_s))

    def truncate(
        self, name: SubscriptionName, end_offset: int | None, reason: str, *, silent: bool = False
    ) -> Future[TruncationEvent]:
        return self.submit(
            name, lambda: requests.TruncateRequest(end_offset, reason, silent=silent)
        )

    def seek(self, name: SubscriptionName, frontier: int, rows: list[leases.Row]) -> None:
        """Restart the subscription at ``frontier`` with ``rows`` outstanding; waits."""
        self.submit(name, lambda: requests.SeekRequest(frontier, rows)).result()

    # -- the lease state -------------------------------------------------------------------

    def state(self, sub: Subscription) -> leases.LeaseState:
        """The subscription's lease state as stored, with this process's dispatcher's
        changes held in memory committed first."""
        dispatcher = self._dispatchers.find(sub.uid)
        if dispatcher is not None and dispatcher.alive:
            flush = requests.FlushRequest()
            with contextlib.suppress(errors.Unavailable):  # stopping: it commits anyway
                dispatcher.submit(flush)
                flush.future.result()
        return self.read_state(self._context.lake.leases_uri(sub.uid))

    def restore(self, name: SubscriptionName, snapshot_uid: str) -> None:
        """Restart the subscription from the lease state a snapshot saved; waits."""
        saved = self.read_state(self._context.lake.snapshot_uri(snapshot_uid))
        self.seek(name, saved.cursor.frontier, list(saved.rows.values()))

    def read_state(self, uri: str) -> leases.LeaseState:
        """A stored lease state (a subscription's, or a snapshot's)."""
        table = self._context.lake.open(uri)
        return leases.LeaseState.from_arrow(table.to_pyarrow_table(), table.version())


def _log_release_failure(name: SubscriptionName, done: Future[dict[str, str]]) -> None:
    exc = done.exception()
    if exc is not None:
        log.info("could not release deliveries of %s: %s", name, exc)
