"""The peer calls' Arrow IPC: a forwarded publish's columns, and a pull's deliveries
(the messages table's columns, null in an event's row, with the delivery's own
fields) so that ``messages.from_arrow`` reads them back."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import orjson
import pyarrow as pa

from lakepubsub._lake import table_schemas
from lakepubsub.messages import Received, ReceivedMessage, Run, TruncationEvent, from_arrow

_DELIVERIES = pa.schema(
    [
        ("ack_id", pa.string()),
        ("delivery_attempt", pa.int32()),
        ("event", pa.string()),  # JSON of a truncation event; null for messages
        *(pa.field(f.name, f.type) for f in table_schemas.MESSAGES),
    ]
)


def ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue())


def from_ipc(body: bytes) -> pa.Table:
    return pa.ipc.open_stream(body).read_all()


def deliveries_to_ipc(items: Sequence[ReceivedMessage]) -> bytes:
    """A pull's answer as Arrow IPC: a ``Received``'s runs go as their columns, with
    no Python object per message; other deliveries are written one by one."""
    tables = [_run_table(p) if isinstance(p, Run) else _table(p) for p in Received.of(items).parts]
    return ipc(pa.concat_tables(tables) if tables else _table([]))


def _run_table(run: Run) -> pa.Table:
    n = len(run)
    columns = {
        "ack_id": run.ack_id_column(),
        "delivery_attempt": pa.array([1] * n, pa.int32()),
        "event": pa.nulls(n, pa.string()),
    }
    return pa.table(
        [
            columns[name] if name in columns else run.table.column(name)
            for name in _DELIVERIES.names
        ],
        schema=_DELIVERIES,
    )


def _table(items: Iterable[ReceivedMessage]) -> pa.Table:
    cols: dict[str, list[Any]] = {name: [] for name in _DELIVERIES.names}
    for item in items:
        cols["ack_id"].append(item.ack_id)
        cols["delivery_attempt"].append(item.delivery_attempt)
        m = item.message
        event = item.event
        cols["event"].append(None if event is None else orjson.dumps(event.to_json()).decode())
        cols["offset"].append(None if m is None else m.offset)
        cols["message_id"].append(None if m is None else m.message_id)
        cols["publish_time"].append(None if m is None else m.publish_time_us)
        cols["data"].append(None if m is None else m.data)
        cols["attributes"].append(None if m is None else list(m.attributes.items()))
        cols["ordering_key"].append(None if m is None else m.ordering_key)
        cols["size"].append(None if m is None else m.size)
    return pa.table(cols, schema=_DELIVERIES)


def deliveries_from_ipc(body: bytes) -> Received:
    """The deliveries ``deliveries_to_ipc`` wrote: first attempts of messages as a
    ``Run`` (in their columns, as the owner's dispatcher handed them out), the rest
    as ``ReceivedMessage`` objects."""
    table = from_ipc(body)
    events, attempts = table.column("event"), table.column("delivery_attempt")
    # null counts and numpy, not Arrow compute calls (tens of µs each, per answer)
    first = events.null_count == table.num_rows and bool((attempts.to_numpy() == 1).all())
    if table.num_rows and first:
        messages = table.select(table_schemas.MESSAGES.names)
        return Received([Run(messages, table.column("ack_id").to_pylist())])
    new = tuple.__new__
    return Received([[
        new(ReceivedMessage, (ack_id, attempt, message, None))
        if event is None
        else ReceivedMessage(ack_id, attempt, event=TruncationEvent.from_json(orjson.loads(event)))
        for ack_id, attempt, event, message in zip(
            table.column("ack_id").to_pylist(),
            table.column("delivery_attempt").to_pylist(),
            table.column("event").to_pylist(),
            from_arrow(table),
            strict=True,
        )
    ]])  # fmt: skip
