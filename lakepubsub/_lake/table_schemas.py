"""Arrow schemas and table properties of every Delta table in the lake.

docs/architecture.md describes the same tables for people; keep them in step.
"""

from __future__ import annotations

import functools

import numpy as np
import pyarrow as pa

from lakepubsub import constants

UTC_US = pa.timestamp("us", tz="UTC")


def utc_us_column(micros: int, n: int) -> pa.Array:
    """``n`` times the instant ``micros`` (microseconds since the epoch), made from
    numpy without converting each Python int."""
    return pa.Array.from_buffers(UTC_US, n, [None, pa.py_buffer(np.full(n, micros, np.int64))])


ATTRIBUTES = pa.map_(pa.string(), pa.string())

# One row per published message. Offsets are dense per topic and never reused.
MESSAGES = pa.schema(
    [
        pa.field("offset", pa.int64(), nullable=False),
        pa.field("message_id", pa.string(), nullable=False),
        pa.field("publish_time", UTC_US, nullable=False),
        pa.field("data", pa.binary()),
        pa.field("attributes", ATTRIBUTES),
        pa.field("ordering_key", pa.string()),
        pa.field("size", pa.int64(), nullable=False),
    ]
)

# The intake (lakepubsub/publish/intake.py): messages of every topic, committed together,
# until they move to their topics' tables.
INTAKE = pa.schema([pa.field("topic_uid", pa.string(), nullable=False), *MESSAGES])

# Row kinds of a subscription's lease table.
KIND_CURSOR = 0
KIND_MESSAGE = 1
KIND_EVENT = 2

# One table per subscription: one cursor row, one row per outstanding message
# (leased, waiting for redelivery, or held back by ordering), one row per
# undelivered or unacknowledged event. Acknowledging deletes the row.
LEASES = pa.schema(
    [
        pa.field("kind", pa.int8(), nullable=False),
        pa.field("offset", pa.int64(), nullable=False),
        pa.field("delivery_id", pa.int64(), nullable=False),
        pa.field("attempt", pa.int32(), nullable=False),
        pa.field("state", pa.int8(), nullable=False),
        pa.field("deadline_us", pa.int64(), nullable=False),
        pa.field("ordering_key", pa.string()),
        pa.field("event", pa.string()),
        pa.field("frontier", pa.int64()),
        pa.field("next_delivery", pa.int64()),
        pa.field("next_event", pa.int64()),
        pa.field("active_us", pa.int64()),
    ]
)

# Topics, subscriptions and snapshots: a small table, read whole and cached.
CATALOG = pa.schema(
    [
        pa.field("kind", pa.string(), nullable=False),
        pa.field("project", pa.string(), nullable=False),
        pa.field("name", pa.string(), nullable=False),
        pa.field("uid", pa.string(), nullable=False),
        pa.field("topic_uid", pa.string()),
        pa.field("created_us", pa.int64(), nullable=False),
        pa.field("updated_us", pa.int64(), nullable=False),
        pa.field("spec", pa.string(), nullable=False),
    ]
)

# One row per truncation (explicit or by policy), for operators to query.
TRUNCATIONS = pa.schema(
    [
        pa.field("subscription", pa.string(), nullable=False),
        pa.field("subscription_uid", pa.string(), nullable=False),
        pa.field("time", UTC_US, nullable=False),
        pa.field("reason", pa.string(), nullable=False),
        pa.field("first_offset", pa.int64(), nullable=False),
        pa.field("end_offset", pa.int64(), nullable=False),
        pa.field("messages_dropped", pa.int64(), nullable=False),
        pa.field("bytes_dropped", pa.int64(), nullable=False),
    ]
)

_COMMON = {
    "delta.checkpointInterval": constants.CHECKPOINT_INTERVAL,
    "delta.logRetentionDuration": constants.LOG_RETENTION,
}
MESSAGES_PROPERTIES = {
    **_COMMON,
    "delta.setTransactionRetentionDuration": constants.SET_TRANSACTION_RETENTION,
}
DELETED_FILE_RETENTION = "delta.deletedFileRetentionDuration"
LEASES_PROPERTIES = {
    **_COMMON,
    DELETED_FILE_RETENTION: f"interval {constants.LEASE_FILE_RETENTION_HOURS} hours",
}
CATALOG_PROPERTIES = dict(_COMMON)
# Committed four times a second on S3: a checkpoint every 100 commits, not 10 (each
# lists every live intake file; a reader replays at most 100 small commits).
INTAKE_PROPERTIES = {
    **MESSAGES_PROPERTIES,
    "delta.checkpointInterval": constants.INTAKE_CHECKPOINT_INTERVAL,
    "delta.logRetentionDuration": constants.INTAKE_LOG_RETENTION,
}
TRUNCATIONS_PROPERTIES = {**_COMMON, "delta.appendOnly": "true"}


# Empty tables, made once and shared (a table never changes): pyarrow takes about
# 60 µs to make one, reading the environment once per column, and a dispatcher's
# cycle with nothing to read asked for several.


@functools.cache
def empty_messages() -> pa.Table:
    return MESSAGES.empty_table()


@functools.cache
def empty_leases() -> pa.Table:
    return LEASES.empty_table()
