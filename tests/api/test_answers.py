"""The engine's answers reach the event loop as asyncio.wrap_future would bring
them (results, errors, cancellation both ways), many at a time, from real threads."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import Future

import pytest

from api import answers


def test_every_answer_arrives_with_its_own_outcome_from_another_thread() -> None:
    async def main() -> None:
        futures: list[Future[int]] = [Future() for _ in range(500)]
        waiters = [answers.of(f) for f in futures]

        def answer_all() -> None:  # as the intake's committer answers a commit's publishes
            for i, future in enumerate(futures):
                if i % 7 == 0:
                    future.set_exception(ValueError(f"no {i}"))
                else:
                    future.set_result(i)

        threading.Thread(target=answer_all).start()
        outcomes = await asyncio.gather(*waiters, return_exceptions=True)
        for i, outcome in enumerate(outcomes):
            if i % 7 == 0:
                assert isinstance(outcome, ValueError) and str(outcome) == f"no {i}"
            else:
                assert outcome == i

    asyncio.run(main())


def test_an_answer_already_there_needs_no_wake() -> None:
    async def main() -> None:
        done: Future[str] = Future()
        done.set_result("here")
        waiter = answers.of(done)
        assert waiter.done() and await waiter == "here"

    asyncio.run(main())


def test_cancelling_the_waiter_cancels_the_engines_future_and_the_reverse() -> None:
    async def main() -> None:
        withdrawn: Future[int] = Future()
        waiter = answers.of(withdrawn)
        waiter.cancel()  # the client went away
        await asyncio.sleep(0)
        assert withdrawn.cancelled()

        gone: Future[int] = Future()
        other = answers.of(gone)
        threading.Thread(target=gone.cancel).start()
        with pytest.raises(asyncio.CancelledError):
            await other

        running: Future[int] = Future()  # too late to withdraw: the answer still arrives
        assert running.set_running_or_notify_cancel()
        late = answers.of(running)
        late.cancel()
        await asyncio.sleep(0)
        assert not running.cancelled()
        running.set_result(1)  # nobody waits for it; no error

    asyncio.run(main())
