"""Schemas and their revisions, kept in the catalog; publish checks messages against them.

A schema is a catalog entry of kind ``schema`` (its type and incarnation uid)
plus one entry of kind ``schema-revision`` per revision, named
``{schema}@{revision id}``, whose spec holds the definition. Every change is
one catalog transaction (read, check, commit with a compare-and-swap), like
topics: committing a revision, rolling back (a new revision copying an old
one), deleting a revision, and deleting a schema, which in the same commit
sets the schema setting of every topic that named it to ``_deleted-schema_``
(publishing to those topics then fails until their settings change).

Revisions are ordered by creation time (``created_us``, strictly increasing
within a schema); their ids are 8 random hex digits, as Pub/Sub's.
"""

from __future__ import annotations

import functools
import secrets
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from lakepubsub import constants, errors
from lakepubsub._lake import table_schemas
from lakepubsub.publish.batches import Batch
from lakepubsub.resources import catalog as cat
from lakepubsub.resources.names import SchemaName, TopicName, validate_project
from lakepubsub.resources.paging import page
from lakepubsub.resources.topics import DELETED_SCHEMA, SchemaSettings
from lakepubsub.schemas.codecs import ENCODINGS, Compiled, check_revision, compile_definition

SCHEMA = "schema"
REVISION = "schema-revision"
REVISION_ID_BYTES = 4
# The attributes every message of a topic with a schema is delivered with (as Pub/Sub).
NAME_ATTRIBUTE = "googclient_schemaname"
ENCODING_ATTRIBUTE = "googclient_schemaencoding"
REVISION_ATTRIBUTE = "googclient_schemarevisionid"
SCHEMA_ATTRIBUTES = (NAME_ATTRIBUTE, ENCODING_ATTRIBUTE, REVISION_ATTRIBUTE)
INVALID_MESSAGE = "Invalid data in message: Message failed schema validation."
# Attribute columns kept built, by (message count, schema, encoding, revision): the
# requests of a few busy topics; a few KiB each (100 messages: ~15 KiB).
ATTRIBUTE_COLUMNS_CACHED = 64


@dataclass(frozen=True)
class Schema:
    """One revision of a schema (the newest, unless a revision was asked for)."""

    name: SchemaName
    type: str
    definition: str
    revision_id: str
    revision_create_time_us: int


def parse_revision_name(path: str) -> tuple[SchemaName, str]:
    """``projects/p/schemas/s`` or ``projects/p/schemas/s@revision``."""
    base, _, revision = path.partition("@")
    return SchemaName.parse(base), revision


class SchemaRegistry:
    """Schema resources on one catalog, and the check publish makes against them."""

    def __init__(self, catalog: cat.Catalog) -> None:
        self._catalog = catalog
        self._lock = threading.Lock()
        # (catalog version, topic's settings) -> revisions a message may match, newest first.
        self._allowed: dict[tuple[int, SchemaSettings], list[tuple[str, Compiled]]] = {}

    # -- schemas ---------------------------------------------------------------------------

    def create(self, name: SchemaName, schema_type: str, definition: str) -> Schema:
        """Create a schema with its first revision; ``AlreadyExists`` if the name is taken."""
        compile_definition(schema_type, definition)
        now = _now_us()
        schema_entry = cat.Entry(
            SCHEMA, name.project, name.id, uuid.uuid4().hex, None, now, now, {"type": schema_type}
        )
        revision = _revision_entry(name, schema_entry.uid, _revision_id(), now, definition)

        def change(view: cat.View) -> tuple[cat.Changes, Schema]:
            if view.get(SCHEMA, name.project, name.id) is not None:
                raise errors.AlreadyExists(f"Schema already exists: {name}")
            if len(view.of_kind(SCHEMA, name.project)) >= constants.MAX_SCHEMAS_PER_PROJECT:
                raise errors.ResourceExhausted(
                    f"Project {name.project} has {constants.MAX_SCHEMAS_PER_PROJECT} schemas, "
                    "the limit"
                )
            return cat.Changes(put=[schema_entry, revision]), _schema(schema_entry, revision)

        return self._catalog.transact(change)

    def get(self, path: str) -> Schema:
        """A schema's newest revision, or the one named ``projects/p/schemas/s@revision``."""
        name, revision_id = parse_revision_name(path)
        view = self._catalog.view()
        entry, revisions = _revisions(view, name)
        if not revision_id:
            return _schema(entry, revisions[0])
        return _schema(entry, _revision(revisions, name, revision_id))

    def list_schemas(
        self, project: str, *, page_size: int = 0, page_token: str = ""
    ) -> tuple[list[Schema], str]:
        """Newest revision of each schema of ``project``, by name."""
        validate_project(project)
        view = self._catalog.view()
        entries = view.of_kind(SCHEMA, project)
        found, token = page(entries, page_size, page_token)
        out = []
        for entry in found:
            _, revisions = _revisions(view, SchemaName(entry.project, entry.name))
            out.append(_schema(entry, revisions[0]))
        return out, token

    def list_revisions(
        self, name: SchemaName, *, page_size: int = 0, page_token: str = ""
    ) -> tuple[list[Schema], str]:
        """Every revision of a schema, newest first."""
        entry, revisions = _revisions(self._catalog.view(), name)
        # Newest first: a key that grows as creation times fall.
        found, token = page(revisions, page_size, page_token, key=_age_key)
        return [_schema(entry, r) for r in found], token

    def commit(self, name: SchemaName, schema_type: str, definition: str) -> Schema:
        """Add a revision; it must be compatible with the newest one (Pub/Sub's rules)."""
        compiled = compile_definition(schema_type, definition)

        def change(view: cat.View) -> tuple[cat.Changes, Schema]:
            entry, revisions = _revisions(view, name)
            newest = compile_definition(entry.spec["type"], revisions[0].spec["definition"])
            check_revision(newest, compiled)
            return self._added(entry, revisions, definition)

        return self._catalog.transact(change)

    def rollback(self, name: SchemaName, revision_id: str) -> Schema:
        """Add a revision that copies the definition of revision ``revision_id``."""
        if not revision_id:
            raise errors.InvalidArgument("revisionId is required")

        def change(view: cat.View) -> tuple[cat.Changes, Schema]:
            entry, revisions = _revisions(view, name)
            old = _revision(revisions, name, revision_id)
            return self._added(entry, revisions, old.spec["definition"])

        return self._catalog.transact(change)

    def _added(
        self, entry: cat.Entry, revisions: list[cat.Entry], definition: str
    ) -> tuple[cat.Changes, Schema]:
        name = SchemaName(entry.project, entry.name)
        if len(revisions) >= constants.MAX_SCHEMA_REVISIONS:
            raise errors.FailedPrecondition(
                f"Schema {name} has {constants.MAX_SCHEMA_REVISIONS} revisions, the limit; "
                "delete a revision before committing another"
            )
        taken = {r.uid for r in revisions}
        revision_id = _revision_id()
        while revision_id in taken:
            revision_id = _revision_id()
        created = max(_now_us(), revisions[0].created_us + 1)
        revision = _revision_entry(name, entry.uid, revision_id, created, definition)
        return cat.Changes(put=[revision]), _schema(entry, revision)

    def delete_revision(self, path: str, revision_id: str = "") -> Schema:
        """Delete one revision (named ``…/schemas/s@revision``, or by the deprecated
        ``revision_id``); answers the schema's newest remaining revision. The only
        revision, and a revision a topic names as the end of its range, stay."""
        name, named = parse_revision_name(path)
        if named and revision_id and named != revision_id:
            raise errors.InvalidArgument(
                f"The revision in the name ({named}) and revisionId ({revision_id}) differ"
            )
        revision_id = named or revision_id
        if not revision_id:
            raise errors.InvalidArgument(
                "The revision to delete is required: projects/{project}/schemas/{schema}@{revision}"
            )

        def change(view: cat.View) -> tuple[cat.Changes, Schema]:
            entry, revisions = _revisions(view, name)
            doomed = _revision(revisions, name, revision_id)
            if len(revisions) == 1:
                raise errors.FailedPrecondition(
                    f"Revision {revision_id} is the only revision of schema {name}; "
                    "delete the schema instead"
                )
            for topic in view.of_kind(cat.TOPIC):
                settings = SchemaSettings.from_spec(topic.spec.get("schema_settings"))
                bounds = (settings.first_revision_id, settings.last_revision_id) if settings else ()
                if settings is not None and settings.schema == name.path and revision_id in bounds:
                    raise errors.FailedPrecondition(
                        f"Revision {revision_id} of schema {name} bounds the revision range "
                        f"of topic {TopicName(topic.project, topic.name)}; change the "
                        "topic's schemaSettings first"
                    )
            remaining = [r for r in revisions if r.uid != revision_id]
            return cat.Changes(delete=[doomed.key]), _schema(entry, remaining[0])

        return self._catalog.transact(change)

    def delete(self, name: SchemaName) -> None:
        """Delete a schema and its revisions; topics that used it then read
        ``_deleted-schema_`` and refuse publishes until their settings change."""

        def change(view: cat.View) -> tuple[cat.Changes, None]:
            entry, revisions = _revisions(view, name)
            put = []
            for topic in view.of_kind(cat.TOPIC):
                spec = topic.spec.get("schema_settings")
                if spec and spec.get("schema") == name.path:
                    gone = {**spec, "schema": DELETED_SCHEMA}
                    put.append(replace(topic, spec={**topic.spec, "schema_settings": gone}))
            doomed = [entry.key, *(r.key for r in revisions)]
            return cat.Changes(put=put, delete=doomed), None

        self._catalog.transact(change)

    # -- topics ------------------------------------------------------------------------------

    def check_settings(self, view: cat.View, settings: SchemaSettings | None) -> None:
        """A topic's schema settings name an existing schema and revisions of it, in order.
        Called inside the topic's catalog transaction."""
        if settings is None:
            return
        if settings.deleted:
            raise errors.InvalidArgument(
                f"schemaSettings.schema {DELETED_SCHEMA} names a deleted schema; name a schema"
            )
        name = SchemaName.parse(settings.schema)
        _, revisions = _revisions(view, name)
        first = _revision(revisions, name, settings.first_revision_id, "firstRevisionId")
        last = _revision(revisions, name, settings.last_revision_id, "lastRevisionId")
        if first is not None and last is not None and first.created_us > last.created_us:
            raise errors.InvalidArgument(
                f"schemaSettings.firstRevisionId {first.uid} is newer than lastRevisionId "
                f"{last.uid}"
            )

    def conform(
        self, view: cat.View, topic: TopicName, settings: SchemaSettings, batch: Batch
    ) -> Batch:
        """``batch`` with the schema attributes added, if every message is valid for one
        of the allowed revisions (the newest that accepts it names it); otherwise
        ``InvalidArgument`` naming the first message that is not, and nothing is
        published."""
        if settings.deleted:
            raise errors.FailedPrecondition(
                f"The schema of topic {topic} was deleted; publishing to it fails until its "
                "schemaSettings change"
            )
        allowed = self._allowed_revisions(view, settings)
        data = [blob or b"" for blob in batch.columns.column("data").to_pylist()]
        chosen = [""] * len(data)
        # Each revision, newest first, checks in one pass the messages no newer one took.
        pending = list(range(len(data)))
        refused: list[tuple[int, str]] = []
        for revision_id, compiled in allowed:
            found = compiled.problems([data[i] for i in pending], settings.encoding)
            refused = []
            for i, problem in zip(pending, found, strict=True):
                if problem is None:
                    chosen[i] = revision_id
                else:
                    refused.append((i, problem))
            if not refused:
                return _with_attributes(batch, settings, chosen)
            pending = [i for i, _ in refused]
        i, problem = refused[0]
        raise errors.InvalidArgument(f"{INVALID_MESSAGE} messages[{i}]: {problem}")

    def _allowed_revisions(
        self, view: cat.View, settings: SchemaSettings
    ) -> list[tuple[str, Compiled]]:
        key = (view.version, settings)
        with self._lock:
            found = self._allowed.get(key)
        if found is not None:
            return found
        name = SchemaName.parse(settings.schema)
        try:
            entry, revisions = _revisions(view, name)
        except errors.NotFound:
            raise errors.FailedPrecondition(
                f"The schema {name} of the topic no longer exists"
            ) from None
        by_id = {r.uid: r for r in revisions}
        low = (
            by_id[settings.first_revision_id].created_us
            if settings.first_revision_id in by_id
            else 0
        )
        high = (
            by_id[settings.last_revision_id].created_us
            if settings.last_revision_id in by_id
            else 1 << 62
        )
        found = [
            (r.uid, compile_definition(entry.spec["type"], r.spec["definition"]))
            for r in revisions
            if low <= r.created_us <= high
        ]
        if not found:
            raise errors.FailedPrecondition(f"No revision of schema {name} is in the topic's range")
        with self._lock:
            if len(self._allowed) > constants.COMPILED_SCHEMAS_CACHED:
                self._allowed.clear()
            self._allowed[key] = found
        return found

    # -- validation ------------------------------------------------------------------------

    @staticmethod
    def validate_definition(schema_type: str, definition: str) -> None:
        """``InvalidArgument`` unless ``definition`` is a valid schema of the type."""
        compile_definition(schema_type, definition)

    def validate_message(
        self, *, name: str = "", schema_type: str = "", definition: str = "",
        data: bytes, encoding: str,
    ) -> None:  # fmt: skip
        """``InvalidArgument`` unless ``data`` is a valid message of the named schema
        (its newest revision, or ``name@revision``) or of the given definition."""
        if encoding not in ENCODINGS:
            raise errors.InvalidArgument("encoding must be JSON or BINARY")
        if name:
            schema = self.get(name)
            compiled = compile_definition(schema.type, schema.definition)
        else:
            compiled = compile_definition(schema_type, definition)
        problem = compiled.problem(data, encoding)
        if problem is not None:
            raise errors.InvalidArgument(f"{INVALID_MESSAGE} {problem}")

    def compiled_revisions(self, name: SchemaName) -> tuple[str, list[tuple[Schema, Compiled]]]:
        """The schema's type and every revision with its compiled form, newest first
        (for the typed views)."""
        entry, revisions = _revisions(self._catalog.view(), name)
        out = []
        for r in revisions:
            schema = _schema(entry, r)
            out.append((schema, compile_definition(schema.type, schema.definition)))
        return entry.spec["type"], out


def _age_key(entry: cat.Entry) -> str:
    return f"{(1 << 62) - entry.created_us:020d}"


def _now_us() -> int:
    return time.time_ns() // 1000


def _revision_id() -> str:
    return secrets.token_hex(REVISION_ID_BYTES)


def _revision_entry(
    name: SchemaName, schema_uid: str, revision_id: str, created_us: int, definition: str
) -> cat.Entry:
    return cat.Entry(
        REVISION,
        name.project,
        f"{name.id}@{revision_id}",
        revision_id,
        None,
        created_us,
        created_us,
        {"schema_uid": schema_uid, "definition": definition},
    )


def _revisions(view: cat.View, name: SchemaName) -> tuple[cat.Entry, list[cat.Entry]]:
    """A schema's entry and its revisions, newest first; ``NotFound`` if it does not exist."""
    entry = view.get(SCHEMA, name.project, name.id)
    if entry is None:
        raise errors.NotFound(f"Schema not found: {name}")
    prefix = f"{name.id}@"
    revisions = [
        e
        for e in view.of_kind(REVISION, name.project)
        if e.name.startswith(prefix) and e.spec.get("schema_uid") == entry.uid
    ]
    revisions.sort(key=lambda e: e.created_us, reverse=True)
    return entry, revisions


def _revision(
    revisions: Sequence[cat.Entry], name: SchemaName, revision_id: str, what: str = "revision"
) -> Any:
    if not revision_id:
        return None
    for entry in revisions:
        if entry.uid == revision_id:
            return entry
    raise errors.NotFound(f"Schema revision not found: {name}@{revision_id} ({what})")


def _schema(entry: cat.Entry, revision: cat.Entry) -> Schema:
    return Schema(
        SchemaName(entry.project, entry.name),
        entry.spec["type"],
        revision.spec["definition"],
        revision.uid,
        revision.created_us,
    )


def _with_attributes(batch: Batch, settings: SchemaSettings, revisions: list[str]) -> Batch:
    """The batch with the three schema attributes on every message (any a client sent
    under those keys replaced), and sizes that count them."""
    columns = batch.columns
    n = columns.num_rows
    fixed = len(NAME_ATTRIBUTE) + len(ENCODING_ATTRIBUTE) + len(REVISION_ATTRIBUTE)
    fixed += len(settings.schema.encode()) + len(settings.encoding)
    one_revision = n > 0 and revisions.count(revisions[0]) == n
    current = columns.column("attributes")
    merged: pa.Array
    if current.null_count == n and one_revision:  # the usual request
        merged = _only_schema_attributes(n, settings.schema, settings.encoding, revisions[0])
    elif current.null_count == n:
        merged = _schema_attributes(
            n, [v for r in revisions for v in (settings.schema, settings.encoding, r)]
        )
    else:
        rows = []
        for attrs, revision in zip(current.to_pylist(), revisions, strict=True):
            kept = [(k, v) for k, v in attrs or () if k not in SCHEMA_ATTRIBUTES]
            kept += [
                (NAME_ATTRIBUTE, settings.schema),
                (ENCODING_ATTRIBUTE, settings.encoding),
                (REVISION_ATTRIBUTE, revision),
            ]
            rows.append(kept)
        merged = pa.array(rows, table_schemas.ATTRIBUTES)
    if one_revision:
        each = fixed + len(revisions[0])
        sizes = pc.add(columns.column("size"), pa.scalar(each, pa.int64()))
        added = each * n
    else:
        more = [fixed + len(r) for r in revisions]
        sizes = pc.add(columns.column("size"), pa.array(more, pa.int64()))
        added = sum(more)
    out = columns.set_column(
        columns.schema.get_field_index("attributes"), "attributes", merged
    ).set_column(columns.schema.get_field_index("size"), "size", sizes)
    return Batch(out, batch.size + added)


@functools.lru_cache(maxsize=ATTRIBUTE_COLUMNS_CACHED)
def _only_schema_attributes(n: int, schema: str, encoding: str, revision: str) -> pa.Array:
    """The attributes column of n messages that have only the schema attributes, all
    of one revision."""
    return _schema_attributes(n, (schema, encoding, revision) * n)


def _schema_attributes(n: int, values: Sequence[str]) -> pa.Array:
    """The attributes column of n messages that have only the schema attributes, given
    their values in the order of ``SCHEMA_ATTRIBUTES``, message by message."""
    return pa.MapArray.from_arrays(
        pa.array(range(0, 3 * n + 1, 3), pa.int32()),
        pa.array(SCHEMA_ATTRIBUTES * n, pa.string()),
        pa.array(values, pa.string()),
    )
