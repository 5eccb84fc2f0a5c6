"""The one port hands its gRPC connections to several grpcio servers in turn
(``api/grpc/door.py``, ``ACCEPT_LOOPS``): a grpc.aio server takes in one call at a
time, so the calls of a busy connection must not queue the calls of another."""

from __future__ import annotations

from collections import Counter

import grpc
import psutil
from google.pubsub_v1.types import pubsub as ps
from grpckit import Serve

from api.grpc.door import ACCEPT_LOOPS


def _relayed_to(serve: Serve) -> list[int]:
    """The grpcio ports the server's relay connections go to: connections it opened
    to a port it listens on itself, other than the one port."""
    conns = psutil.Process(serve.process.pid).net_connections(kind="tcp")
    listening = {c.laddr.port for c in conns if c.status == psutil.CONN_LISTEN}
    return [
        c.raddr.port
        for c in conns
        if c.status == psutil.CONN_ESTABLISHED
        and c.raddr
        and c.raddr.port in listening - {serve.port}
        and c.laddr.port not in listening
    ]


def test_two_connections_through_the_one_port_reach_two_grpc_servers(serve: Serve) -> None:
    assert ACCEPT_LOOPS >= 2
    before = _relayed_to(serve)
    # A channel of its own subchannel pool: two channels, two connections.
    channels = [
        grpc.insecure_channel(serve.host, options=[("grpc.use_local_subchannel_pool", 1)])
        for _ in range(2)
    ]
    try:
        request = ps.ListTopicsRequest.pb()(project="projects/accept-loops").SerializeToString()
        for channel in channels:
            answer: bytes = channel.unary_unary("/google.pubsub.v1.Publisher/ListTopics")(request)
            assert ps.ListTopicsResponse.pb().FromString(answer).topics == []
        after = _relayed_to(serve)
        new = Counter(after) - Counter(before)  # the two channels' connections, by port
        assert sorted(new.values()) == [1, 1], (before, after)
    finally:
        for channel in channels:
            channel.close()
