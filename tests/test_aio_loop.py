"""The process's one grpc.aio event loop (lakepubsub/aio_loop.py): shared while
held, stopped by the last user; a server's gRPC door and peer server run on it."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest
import uvloop

from api.app import create_app
from lakepubsub import settings
from lakepubsub.aio_loop import SharedLoop, new_event_loop


def _threads(name: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == name]


async def _here() -> threading.Thread:
    return threading.current_thread()


def test_one_loop_while_held_then_a_new_one() -> None:
    shared = SharedLoop("test-aio-loop")
    first = shared.acquire()
    assert shared.acquire() is first
    runs_on = asyncio.run_coroutine_threadsafe(_here(), first).result(5)
    assert runs_on.name == "test-aio-loop"
    assert _threads("test-aio-loop") == [runs_on]

    shared.release()  # one user left: still running
    assert first.is_running()
    assert asyncio.run_coroutine_threadsafe(_here(), first).result(5) is runs_on

    shared.release()  # the last: stopped, closed, its thread gone
    assert first.is_closed()
    assert not runs_on.is_alive()
    assert _threads("test-aio-loop") == []

    second = shared.acquire()
    try:
        assert second is not first
        assert asyncio.run_coroutine_threadsafe(_here(), second).result(5).is_alive()
    finally:
        shared.release()
    assert second.is_closed()


def test_a_server_runs_its_grpc_door_and_peer_server_on_one_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LAKEPUBSUB_LAKE", str(tmp_path / "lake"))
    monkeypatch.setenv("LAKEPUBSUB_PUSH", "false")
    before = _threads("grpc-aio")
    app = create_app()
    seen: dict[str, object] = {}

    async def serve() -> None:
        async with app.router.lifespan_context(app):
            peering, door = app.state.engine.peering, app.state.grpc
            assert peering is not None and door is not None
            assert door.loop is peering._loop
            on = await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(_here(), door.loop))
            assert on.name == "grpc-aio"
            assert isinstance(door.loop, uvloop.Loop)  # installed here, so the default
            assert len(_threads("grpc-aio")) == len(before) + 1
            seen.update(thread=on, loop=door.loop)

    asyncio.run(serve())
    thread, loop = seen["thread"], seen["loop"]
    assert isinstance(thread, threading.Thread) and not thread.is_alive()
    assert isinstance(loop, asyncio.AbstractEventLoop) and loop.is_closed()


@pytest.mark.parametrize(
    ("value", "kind"), [("", uvloop.Loop), ("uvloop", uvloop.Loop), (" AsyncIO ", None)]
)
def test_the_loop_is_the_kind_the_setting_names(
    value: str, kind: type | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LAKEPUBSUB_GRPC_LOOP", value)
    loop = new_event_loop()
    try:
        if kind is None:
            assert not isinstance(loop, uvloop.Loop)
            assert isinstance(loop, asyncio.BaseEventLoop)
        else:
            assert isinstance(loop, kind)
        assert loop.run_until_complete(_here()) is threading.current_thread()
    finally:
        loop.close()


def test_an_unknown_loop_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="LAKEPUBSUB_GRPC_LOOP must be one of uvloop, asyncio"):
        settings.grpc_loop({"LAKEPUBSUB_GRPC_LOOP": "trio"})
    assert settings.grpc_loop({}) == "uvloop"
    assert settings.grpc_loop({"LAKEPUBSUB_GRPC_LOOP": "asyncio"}) == "asyncio"
