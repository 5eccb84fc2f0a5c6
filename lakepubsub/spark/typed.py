"""Typed views: a topic's history decoded with its schema, one column per field.

For a topic whose schema is Avro, ``<project>__<topic>__typed`` has the topic
view's offset, message_id, publish_time, ordering_key and attributes, then
``schema_revision_id`` (the revision the message was published under, from its
``googclient_schemarevisionid`` attribute), one column per field of the
*target* revision (the newest revision in the topic's range), and
``decode_error``. Each row is decoded by Spark's own ``from_avro`` with the
revision it was published under as the writer schema and the target as the
reader schema (Avro schema resolution: fields added later take their
defaults, removed ones are dropped). JSON-encoded messages are first turned
into Avro binary by a Python UDF (fastavro); Spark has no Avro JSON decoder.

Rows are never dropped: a row that does not decode keeps its place with NULL
fields and ``decode_error`` saying why (no revision attribute, a revision the
schema no longer has, bytes that do not decode). ``typed_decode_errors``
(registered when the lake has a typed view) counts them per view, revision
and reason.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import orjson
import pyarrow as pa
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as sf
from pyspark.sql.avro.functions import from_avro

from lakepubsub import errors
from lakepubsub.engine import Engine
from lakepubsub.resources.names import SchemaName
from lakepubsub.resources.topics import Topic
from lakepubsub.schemas.codecs import AVRO, compile_definition
from lakepubsub.schemas.registry import ENCODING_ATTRIBUTE, REVISION_ATTRIBUTE

log = logging.getLogger(__name__)

TYPED_SUFFIX = "typed"
ERRORS_VIEW = "typed_decode_errors"
METADATA = ("offset", "message_id", "publish_time", "ordering_key", "attributes")
# A metadata column whose name a schema field also has is prefixed with this.
METADATA_PREFIX = "_pubsub_"


def typed_frame(engine: Engine, topic: Topic, frame: DataFrame) -> DataFrame | None:
    """The typed view of ``frame`` (the topic's messages), or None when the topic has
    no schema (or a deleted one, or a protobuf one: see docs/spark.md). Why a topic
    has none is logged at INFO: every Spark command registers every view, and a
    warning would be printed on each, whether the query reads that topic or not."""
    settings = topic.schema_settings
    if settings is None:
        return None
    if settings.deleted:
        log.info("%s: its schema was deleted; no typed view", topic.name)
        return None
    try:
        schema_type, revisions = engine.schemas.compiled_revisions(
            SchemaName.parse(settings.schema)
        )
    except errors.NotFound:
        log.info("%s: schema %s not found; no typed view", topic.name, settings.schema)
        return None
    if schema_type != AVRO:
        log.info("%s: typed views decode Avro schemas only; none for protobuf", topic.name)
        return None
    in_range = _in_range(
        [(s.revision_id, s.revision_create_time_us) for s, _ in revisions],
        settings.first_revision_id,
        settings.last_revision_id,
    )
    definitions = {s.revision_id: s.definition for s, _ in revisions}
    target = definitions[in_range[0]] if in_range else revisions[0][0].definition
    return _decoded(frame, definitions, target, json_topic=settings.encoding == "JSON")


def _in_range(revisions: list[tuple[str, int]], first: str, last: str) -> list[str]:
    """Revision ids (newest first) between ``first`` and ``last``, either end open."""
    times = dict(revisions)
    low = times.get(first, 0)
    high = times.get(last, 1 << 62)
    return [r for r, t in revisions if low <= t <= high]


def _decoded(
    frame: DataFrame, definitions: Mapping[str, str], target: str, *, json_topic: bool
) -> DataFrame:
    revision = sf.col("attributes")[REVISION_ATTRIBUTE]
    encoding = sf.col("attributes")[ENCODING_ATTRIBUTE]
    data = sf.col("data")
    if json_topic:
        # Only a topic that takes JSON pays for the Python step; a BINARY topic's
        # JSON rows (from before an encoding change) are reported, not decoded.
        data = _json_to_avro(dict(definitions))(encoding, revision, data)
    options = {"avroSchema": target, "mode": "PERMISSIVE"}
    value: Any = None
    for revision_id, definition in definitions.items():
        decoded = from_avro(data, definition, options)
        value = (sf.when if value is None else value.when)(revision == revision_id, decoded)
    known = list(definitions)
    decode_error = (
        sf.when(revision.isNull(), sf.lit("no googclient_schemarevisionid attribute"))
        .when(
            ~revision.isin(known),
            sf.concat(sf.lit("revision "), revision, sf.lit(" is no longer in the schema")),
        )
        .when(
            sf.lit(not json_topic) & (encoding == "JSON"),
            sf.lit("JSON-encoded; the topic's encoding is BINARY now"),
        )
        .when(
            sf.col("_value").isNull(),
            sf.concat(sf.lit("does not decode with revision "), revision),
        )
    )
    staged = frame.select(*METADATA, revision.alias("schema_revision_id"), value.alias("_value"))
    fields = _record_fields(target)
    metadata = [
        sf.col(c).alias(METADATA_PREFIX + c if c in fields else c)
        for c in (*METADATA, "schema_revision_id")
    ]
    columns: list[Column] = (
        [sf.col("_value")[f].alias(f) for f in fields]
        if fields
        else [sf.col("_value").alias("value")]
    )
    error_name = METADATA_PREFIX + "decode_error" if "decode_error" in fields else "decode_error"
    return staged.select(*metadata, *columns, decode_error.alias(error_name))


def _record_fields(definition: str) -> list[str]:
    doc = orjson.loads(definition)
    if isinstance(doc, dict) and doc.get("type") == "record":
        return [f["name"] for f in doc.get("fields", [])]
    return []


def _json_to_avro(definitions: dict[str, str]) -> Any:
    """An Arrow UDF: JSON-encoded messages as Avro binary (others unchanged; None
    where the JSON is not a message of its revision). Definitions compile once per
    worker process (``compile_definition`` keeps them)."""

    def convert(encodings: pa.Array, revisions: pa.Array, data: pa.Array) -> pa.Array:
        out = []
        rows = zip(encodings.to_pylist(), revisions.to_pylist(), data.to_pylist(), strict=True)
        for encoding, revision_id, blob in rows:
            if encoding != "JSON" or revision_id not in definitions or blob is None:
                out.append(blob)
                continue
            try:
                out.append(compile_definition(AVRO, definitions[revision_id]).to_binary(blob))
            except Exception:  # a malformed row decodes to NULL and is reported
                out.append(None)
        return pa.array(out, pa.binary())

    return sf.arrow_udf(convert, "binary")  # type: ignore[attr-defined]


def errors_frame(spark: SparkSession, typed_views: list[str]) -> DataFrame:
    """Rows that did not decode, counted per typed view (at least one), revision and reason."""
    parts = [
        f"SELECT '{name}' AS view, schema_revision_id, decode_error, count(*) AS messages "
        f"FROM {name} WHERE decode_error IS NOT NULL GROUP BY schema_revision_id, decode_error"
        for name in typed_views
    ]
    return spark.sql(" UNION ALL ".join(parts))
