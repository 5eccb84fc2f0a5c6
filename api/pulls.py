"""A pull under way, the same for both doors: started without blocking the event
loop, withdrawn when its caller goes away, so a closed connection strands nothing."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any

from api import answers
from lakepubsub import Engine
from lakepubsub.messages import ReceivedMessage
from lakepubsub.resources.names import SubscriptionName


async def start_pull(
    engine: Engine,
    name: SubscriptionName,
    *,
    max_messages: int,
    return_immediately: bool = False,
    ack_deadline_s: int | None = None,
) -> Future[Sequence[ReceivedMessage]]:
    """A pull under way (every door): started inline when the catalog is cached, else
    on a worker thread (it reads storage). A caller cancelled while the pull starts
    withdraws it once started, so it strands nothing."""

    def start() -> Future[Sequence[ReceivedMessage]]:
        return engine.pull_future(
            name,
            max_messages=max_messages,
            return_immediately=return_immediately,
            ack_deadline_s=ack_deadline_s,
        )

    if engine.lookups_need_no_io():
        return start()
    starting = asyncio.ensure_future(asyncio.to_thread(start))
    try:
        return await asyncio.shield(starting)
    except asyncio.CancelledError:
        starting.add_done_callback(lambda task: _withdraw_started(engine, name, task))
        raise


def _withdraw_started(
    engine: Engine, name: SubscriptionName, task: asyncio.Future[Future[Sequence[ReceivedMessage]]]
) -> None:
    if not task.cancelled() and task.exception() is None:
        engine.withdraw(name, task.result())


def reports_attempts(engine: Engine, name: SubscriptionName) -> bool:
    """Whether deliveries of ``name`` carry their attempt (``Subscription.
    reports_delivery_attempts``); a pull just looked the subscription up, so the
    cached catalog answers."""
    return engine.get_subscription(name, fresh=False).reports_delivery_attempts


async def pulled(
    engine: Engine,
    name: SubscriptionName,
    future: Future[Sequence[ReceivedMessage]],
    gone: asyncio.Future[Any] | None = None,
) -> Sequence[ReceivedMessage]:
    """What the pull ``future`` delivers (both doors). If the caller goes away first
    (this task is cancelled, or ``gone`` completes: the client disconnected), the pull
    is withdrawn, what it was given is released for the next receiver at once, and
    the answer is empty (nobody reads it)."""
    answer = answers.of(future)
    try:
        if gone is not None:
            await asyncio.wait((answer, gone), return_when=asyncio.FIRST_COMPLETED)
            if not answer.done():
                answer.cancel()
                engine.withdraw(name, future)
                return []
        return await answer
    except asyncio.CancelledError:
        engine.withdraw(name, future)
        raise
