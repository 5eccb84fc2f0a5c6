"""A pull's answer between peers (lakepubsub/peering/codec.py): what one process's
dispatcher handed out is what the other's door gets, runs of new messages staying
in their columns both ways."""

from __future__ import annotations

import pyarrow as pa

from lakepubsub._lake import table_schemas
from lakepubsub.messages import Message, Received, ReceivedMessage, Run, TruncationEvent
from lakepubsub.peering import codec


def run_of(first: int, n: int) -> Run:
    table = pa.table(
        {
            "offset": list(range(first, first + n)),
            "message_id": [str(i) for i in range(first, first + n)],
            "publish_time": [1_764_000_000_000_001 + i for i in range(n)],
            "data": [b"d" * i if i % 3 else None for i in range(n)],
            "attributes": [[("k", str(i))] if i % 2 else None for i in range(n)],
            "ordering_key": ["" if i % 4 else None for i in range(n)],
            "size": list(range(n)),
        },
        schema=table_schemas.MESSAGES,
    )
    # stored in two files: a column of two chunks
    chunked = pa.concat_tables([table.slice(0, n // 2), table.slice(n // 2)])
    return Run(chunked, [f"0a1b2c3d-m{o}-{o + 7}" for o in range(first, first + n)])


def test_a_run_crosses_as_a_run() -> None:
    run = run_of(10, 9)
    back = codec.deliveries_from_ipc(codec.deliveries_to_ipc(Received([run])))
    assert [type(p) for p in back.parts] == [Run]
    assert list(back) == run.received()


def test_redeliveries_and_events_cross_as_deliveries() -> None:
    again = ReceivedMessage("0a1b2c3d-m3-40", 2, Message(3, "3", 5, b"x", {"a": "b"}, "k", 3))
    event = ReceivedMessage("0a1b2c3d-e0-41", 1, event=TruncationEvent(0, 3, "max_bytes", 9))
    sent = Received([[again, event], run_of(100, 4)])
    back = codec.deliveries_from_ipc(codec.deliveries_to_ipc(sent))
    assert list(back) == list(sent)
    assert back.ack_ids() == sent.ack_ids()
    empty = codec.deliveries_from_ipc(codec.deliveries_to_ipc([]))
    assert len(empty) == 0
