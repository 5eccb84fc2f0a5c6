"""Routing a call to a topic's owner: the other process that commits for the topic,
or this one (None); when the owner cannot be reached, the work is done here."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError
from typing import TypeVar

from lakepubsub.peering.membership import Member
from lakepubsub.peering.peers import Peering
from lakepubsub.peering.transport import Unreachable

T = TypeVar("T")
Route = tuple[Peering, Member]  # the owner, and the peering that reaches it


def owner_of(peering: Peering | None, topic_uid: str) -> Route | None:
    """The other process that commits for the topic, or None if it is this one."""
    member = peering.owner(topic_uid) if peering is not None else None
    return None if peering is None or member is None else (peering, member)


def via_owner(
    owner: Route | None,
    call: Callable[[Peering, Member], Future[T]],
    here: Callable[[], Future[T]],
    *,
    withdraw: Callable[[Future[T]], None] | None = None,
) -> Future[T]:
    """``call`` the topic's owner, or do the work ``here`` when this process is
    the owner or the owner cannot be reached. With ``withdraw``, cancelling the
    answer withdraws the work it waits on (a pull whose caller went away)."""
    if owner is None:
        return here()
    result: Future[T] = Future()
    waiting_on: list[Future[T]] = []  # the owner's call, then the local work

    def done(finished: Future[T]) -> None:
        if result.cancelled() or finished.cancelled():
            return  # withdrawn: ``withdraw`` took care of ``finished``
        if not isinstance(finished.exception(), Unreachable):
            _copy(finished, result)
            return
        try:
            local = here()
        except BaseException as failure:
            with contextlib.suppress(InvalidStateError):  # withdrawn meanwhile
                result.set_exception(failure)
            return
        waiting_on.append(local)
        if result.cancelled() and withdraw is not None:
            withdraw(local)
        local.add_done_callback(lambda f: _copy(f, result))

    first = call(*owner)
    waiting_on.append(first)
    if withdraw is not None:
        result.add_done_callback(lambda r: r.cancelled() and withdraw(waiting_on[-1]))
    first.add_done_callback(done)
    return result


def _copy(source: Future[T], target: Future[T]) -> None:
    """``source``'s outcome to ``target``, unless either was cancelled (withdrawn)."""
    if source.cancelled():
        target.cancel()
        return
    exc = source.exception()
    with contextlib.suppress(InvalidStateError):
        if exc is not None:
            target.set_exception(exc)
        else:
            target.set_result(source.result())
