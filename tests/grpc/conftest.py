"""Fixtures: ``lakepubsub serve`` as a real process, and Google's unmodified Python client
pointed at it with nothing but ``PUBSUB_EMULATOR_HOST``."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from google.cloud import pubsub_v1
from grpckit import Names, Serve, start_serve, stop_serve
from support import LakeSpec


@pytest.fixture
def serve(lake: LakeSpec, tmp_path: Path) -> Iterator[Serve]:
    srv = start_serve(lake, tmp_path)
    yield srv
    stop_serve(srv)


@pytest.fixture
def emulator(serve: Serve, monkeypatch: pytest.MonkeyPatch) -> Serve:
    """``PUBSUB_EMULATOR_HOST`` set for the clients a test makes."""
    monkeypatch.setenv("PUBSUB_EMULATOR_HOST", serve.host)
    return serve


@pytest.fixture
def publisher(emulator: Serve) -> Iterator[pubsub_v1.PublisherClient]:
    client = pubsub_v1.PublisherClient()
    yield client
    client.stop()
    client.transport.close()


@pytest.fixture
def subscriber(emulator: Serve) -> Iterator[pubsub_v1.SubscriberClient]:
    with pubsub_v1.SubscriberClient() as client:
        yield client


@pytest.fixture
def names() -> Names:
    return Names(uuid.uuid4().hex[:8])
