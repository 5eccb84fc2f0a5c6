"""One intake commit's rows, built in one go for every topic in it.

The publishers hand the intake their checked batches as they came (``Batch``:
Python lists, or Arrow columns for a group another process forwarded). Turning
each into Arrow on its own cost about 150 µs a request in pyarrow calls (the
columns, then the offsets, ids and times, then the topic column: some 15 calls
of a few µs each, whatever the rows), which at 100 topics with one message a
topic per commit was that much per message. Here the lists of a whole commit
become Arrow together, one call per column, with the rows of a topic next to
each other; each topic's rows are then a zero-copy slice of the commit's table.

``Body`` keeps what does not depend on the topics' heads (built once);
``numbered`` adds the offsets and ids from the heads of the attempt, which a
lost race may change.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from lakepubsub import errors
from lakepubsub._lake import table_schemas as schemas
from lakepubsub.publish.batches import Batch, combined

# The messages-table columns a batch carries (batches._table).
_GIVEN = ("data", "attributes", "ordering_key", "size")


class Body:
    """The rows of ``batches`` (topic, batch pairs) without their offsets: their
    columns, each topic's rows next to each other in the order its batches came,
    the topic column, and where each topic's rows are."""

    def __init__(self, batches: Sequence[tuple[str, Batch]]) -> None:
        topics: dict[str, list[Batch]] = {}
        for uid, batch in batches:
            topics.setdefault(uid, []).append(batch)
        self.spans: dict[str, tuple[int, int]] = {}  # topic -> (first row, rows)
        uids: list[str] = []
        parts: list[pa.Table] = []
        pending: list[Batch] = []  # consecutive batches still in lists
        for uid, topic_batches in topics.items():
            n = sum(batch.count for batch in topic_batches)
            self.spans[uid] = (len(uids), n)
            uids.extend([uid] * n)
            for batch in topic_batches:
                if batch.has_columns:
                    if pending:
                        parts.append(combined(pending))
                        pending = []
                    parts.append(batch.columns.select(_GIVEN))
                else:
                    pending.append(batch)
        if pending:
            parts.append(combined(pending))
        given = (
            parts[0]
            if len(parts) == 1
            else pa.concat_tables(parts, promote_options="permissive").combine_chunks()
        )
        self.rows = len(uids)
        self._topics = pa.array(uids, pa.string())
        self._given = [given.column(name) for name in _GIVEN]

    def numbered(self, heads: dict[str, int], now_us: int) -> pa.Table:
        """The intake rows, each topic's numbered from its head in ``heads``, all
        published at ``now_us``."""
        offsets: list[int] = []
        for uid, (_, n) in self.spans.items():
            head = heads[uid]
            offsets.extend(range(head, head + n))
        numbers = pa.array(offsets, pa.int64())
        stamps = schemas.utc_us_column(now_us, self.rows)
        return pa.Table.from_arrays(
            [self._topics, numbers, numbers.cast(pa.string()), stamps, *self._given],
            schema=schemas.INTAKE,
        )

    def by_topic(self, body: pa.Table) -> dict[str, pa.Table]:
        """Each topic's rows of ``body`` (``numbered``'s) as messages-table rows,
        sharing its buffers."""
        messages = pa.Table.from_arrays(body.columns[1:], schema=schemas.MESSAGES)
        return {uid: messages.slice(start, n) for uid, (start, n) in self.spans.items()}


def unfit(batches: Sequence[Batch]) -> dict[int, errors.InvalidArgument]:
    """The batches whose values do not make Arrow columns (by index), with why: each
    is tried on its own, once building them all together failed."""
    bad = {}
    for at, batch in enumerate(batches):
        try:
            batch.columns  # noqa: B018 (built here, kept by the batch)
        except errors.InvalidArgument as exc:
            bad[at] = exc
    return bad
