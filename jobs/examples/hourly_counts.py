"""Hourly message counts per attribute value: a worked batch-consumer example.

    lakepubsub jobs run batch-consume \\
        --subscription projects/P/subscriptions/orders-hourly \\
        --target ./summaries/orders_hourly \\
        --transform jobs.examples.hourly_counts:transform

or, the same as SQL over the view ``messages``::

    lakepubsub jobs run batch-consume … --sql "$(python -c \\
        'from jobs.examples.hourly_counts import SQL; print(SQL)')"

Each run appends one row per (hour, attribute key, attribute value) seen in
its batch. One hour can span several runs, so the summary table holds partial
counts: sum them when reading::

    SELECT hour, key, value, sum(messages) AS messages, sum(bytes) AS bytes
    FROM summary GROUP BY hour, key, value ORDER BY hour, key, value

Messages without attributes count under key and value ``NULL``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

SQL = """
SELECT date_trunc('HOUR', publish_time) AS hour,
       attribute.key AS key,
       attribute.value AS value,
       count(*) AS messages,
       sum(size) AS bytes,
       max(offset) AS last_offset
FROM messages
LATERAL VIEW OUTER explode(attributes) attribute AS key, value
GROUP BY 1, 2, 3
"""


def transform(messages: DataFrame) -> DataFrame:
    """``SQL`` with the DataFrame API: counts and bytes per hour and attribute key/value."""
    from pyspark.sql import functions as sf  # noqa: PLC0415 — printing SQL needs no PySpark

    return (
        messages.select(
            sf.date_trunc("HOUR", "publish_time").alias("hour"),
            sf.explode_outer("attributes").alias("key", "value"),
            "size",
            "offset",
        )
        .groupBy("hour", "key", "value")
        .agg(
            sf.count("*").alias("messages"),
            sf.sum("size").alias("bytes"),
            sf.max("offset").alias("last_offset"),
        )
    )
