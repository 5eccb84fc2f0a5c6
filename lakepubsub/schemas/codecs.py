"""Schema definitions, compiled once, and messages checked against them.

Avro definitions are checked by Apache Avro's own parser (``avro``), which also
judges whether two revisions are compatible; messages are decoded with
fastavro, binary and JSON (Avro's JSON encoding, unions as ``{"type": value}``).
Protocol Buffer definitions are compiled by protoc (grpcio-tools) into a
``FileDescriptorSet``; messages are parsed by the protobuf runtime, binary or
in protobuf's JSON mapping. Nothing here encodes or decodes by hand.
"""

from __future__ import annotations

import functools
import io
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import IO, Any

import avro.compatibility
import avro.errors
import avro.schema
import fastavro
import fastavro.validation
import orjson
from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import DecodeError, Message

from lakepubsub import constants, errors

AVRO = "AVRO"
PROTOCOL_BUFFER = "PROTOCOL_BUFFER"
TYPES = (PROTOCOL_BUFFER, AVRO)
JSON = "JSON"
BINARY = "BINARY"
ENCODINGS = (JSON, BINARY)
# The file name a .proto definition is compiled under (it appears in protoc's messages).
PROTO_FILE = "schema.proto"
# A library's error message is cut to this many characters in ours.
MAX_ERROR_CHARS = 200


@dataclass(frozen=True, eq=False)
class Compiled:
    """One definition, ready to check messages. ``descriptor_set`` (protobuf) is a
    serialized ``FileDescriptorSet`` and ``message_name`` its one top-level message."""

    schema_type: str
    definition: str
    avro: Any = None
    descriptor_set: bytes = b""
    message_name: str = ""
    message_class: type[Message] | None = field(default=None, repr=False)
    # Avro: reads one binary record of this schema from a stream.
    avro_reader: Callable[[IO[bytes]], Any] | None = field(default=None, repr=False)

    def problem(self, data: bytes, encoding: str) -> str | None:
        """Why ``data`` is not a message of this schema in ``encoding``; None if it is."""
        return self.problems([data], encoding)[0]

    def problems(self, messages: Sequence[bytes], encoding: str) -> list[str | None]:
        """For each message, why it is not a message of this schema in ``encoding``;
        None where it is. Binary Avro messages are read from one stream, one after
        the other, each required to end exactly where its message ends."""
        if self.schema_type == AVRO:
            if encoding == BINARY:
                return _avro_binary_problems(self.avro_reader, messages)
            return _avro_json_problems(self.avro, messages)
        assert self.message_class is not None
        return [_proto_problem(self.message_class, m, encoding) for m in messages]

    def to_binary(self, text: bytes) -> bytes:
        """A JSON-encoded message as the same message in binary (for the typed views)."""
        if self.schema_type == AVRO:
            record = _avro_json(self.avro, text)
            out = io.BytesIO()
            fastavro.schemaless_writer(out, self.avro, record)
            return out.getvalue()
        assert self.message_class is not None
        message = self.message_class()
        json_format.Parse(text, message)
        return message.SerializeToString()


def compile_definition(schema_type: str, definition: str) -> Compiled:
    """The compiled definition; ``InvalidArgument`` saying what is wrong with it."""
    if schema_type not in TYPES:
        raise errors.InvalidArgument(
            f"schema.type must be AVRO or PROTOCOL_BUFFER, not {schema_type or 'unspecified'}"
        )
    if not isinstance(definition, str) or not definition.strip():
        raise errors.InvalidArgument("schema.definition is required")
    size = len(definition.encode())
    if size > constants.MAX_SCHEMA_DEFINITION_BYTES:
        raise errors.InvalidArgument(
            f"schema.definition is {size} bytes; the limit is "
            f"{constants.MAX_SCHEMA_DEFINITION_BYTES}"
        )
    return _compiled(schema_type, definition)


@functools.lru_cache(maxsize=constants.COMPILED_SCHEMAS_CACHED)
def _compiled(schema_type: str, definition: str) -> Compiled:
    if schema_type == AVRO:
        parsed = _parse_avro(definition)
        return Compiled(AVRO, definition, avro=parsed, avro_reader=_binary_reader(parsed))
    descriptor_set, name, cls = _compile_proto(definition)
    return Compiled(
        PROTOCOL_BUFFER,
        definition,
        descriptor_set=descriptor_set,
        message_name=name,
        message_class=cls,
    )


def check_revision(previous: Compiled, new: Compiled) -> None:
    """Pub/Sub's rule for a new revision of a schema: ``InvalidArgument`` unless allowed.

    Avro: the new revision must resolve with the previous one both as reader
    and as writer (Avro's schema resolution, judged by Apache Avro's checker).
    Protocol Buffers: optional fields may be added or removed; no other field
    may be added, removed or changed.
    """
    if previous.schema_type != new.schema_type:
        raise errors.InvalidArgument(
            f"A revision must have the schema's type ({previous.schema_type}), "
            f"not {new.schema_type}"
        )
    if new.schema_type == AVRO:
        checker = avro.compatibility.ReaderWriterCompatibilityChecker()  # type: ignore[no-untyped-call]
        old, now = avro.schema.parse(previous.definition), avro.schema.parse(new.definition)
        for reader, writer, role in ((now, old, "reader"), (old, now, "writer")):
            result = checker.get_compatibility(reader, writer)
            if result.compatibility is not avro.compatibility.SchemaCompatibilityType.compatible:
                kinds = ", ".join(sorted(i.value for i in result.incompatibilities))
                found = f"{kinds} ({', '.join(sorted(result.messages))})"
                raise errors.InvalidArgument(
                    f"The new revision is not compatible with the latest revision as {role} "
                    f"schema: {found}"
                )
        return
    assert previous.message_class is not None and new.message_class is not None
    problems = _proto_changes(previous.message_class.DESCRIPTOR, new.message_class.DESCRIPTOR)
    if problems:
        raise errors.InvalidArgument(
            "The new revision is not compatible with the latest revision: " + "; ".join(problems)
        )


# -- Avro --------------------------------------------------------------------------------------


def _parse_avro(definition: str) -> Any:
    try:
        reference = avro.schema.parse(definition)  # the reference implementation's verdict
        parsed = fastavro.parse_schema(orjson.loads(definition))
    except (avro.errors.AvroException, orjson.JSONDecodeError, ValueError, TypeError) as exc:
        raise errors.InvalidArgument(f"Invalid Avro schema definition: {exc}") from exc
    empty = _arrays_of_empty_items(reference, "", set())
    if empty:
        raise errors.InvalidArgument(
            f"Unsupported Avro schema: the items of the array at {empty} encode in zero "
            "bytes, so a message of a few bytes could declare billions of them; give the "
            "items a value (for example a boolean) or use a count field"
        )
    return parsed


def _arrays_of_empty_items(schema: Any, path: str, seen: set[str]) -> str | None:
    """The path of an array whose items take zero bytes (null, fixed of size 0, a
    record of such fields), if any. Decoders loop once per declared item, and a
    block count is a varint, so a tiny message could keep a publish busy for ever."""
    kind = schema.type
    if kind == "array":
        if _encodes_empty(schema.items, set()):
            return path or "the top level"
        return _arrays_of_empty_items(schema.items, path + "[]", seen)
    if kind == "map":
        return _arrays_of_empty_items(schema.values, path + "{}", seen)
    if kind == "union":
        for branch in schema.schemas:
            found = _arrays_of_empty_items(branch, path, seen)
            if found:
                return found
    if kind in ("record", "error"):
        if schema.fullname in seen:
            return None
        seen.add(schema.fullname)
        for field in schema.fields:
            found = _arrays_of_empty_items(field.type, f"{path}.{field.name}".lstrip("."), seen)
            if found:
                return found
    return None


def _encodes_empty(schema: Any, seen: set[str]) -> bool:
    kind = schema.type
    if kind == "null":
        return True
    if kind == "fixed":
        return bool(schema.size == 0)
    if kind in ("record", "error"):
        if schema.fullname in seen:  # a recursive record needs a non-empty branch to end
            return False
        seen.add(schema.fullname)
        return all(_encodes_empty(field.type, seen) for field in schema.fields)
    return False  # every other type writes at least one byte


def _binary_reader(schema: Any) -> Callable[[IO[bytes]], Any]:
    """A reader of one binary record. ``schemaless_reader`` sets up the schema and its
    options again on every call (~0.5 µs, a tenth of a 1 KiB record's decoding); where
    fastavro's compiled decoder reads as it does, this calls it with them set up once."""
    if _fastavro_decoder_reads_as_public():
        try:
            return _fastavro_decoder(schema)
        except Exception:  # fastavro raises many kinds; its public reader serves
            pass
    return functools.partial(fastavro.schemaless_reader, writer_schema=schema)


def _fastavro_decoder(schema: Any) -> Callable[[IO[bytes]], Any]:
    # fastavro's private reader, imported here: a release without it raises in this call
    # and the caller falls back to the public reader.
    from fastavro._read import (  # type: ignore[attr-defined]  # noqa: PLC0415 — may be gone
        _default_named_schemas,
        _read_data,
    )

    named = _default_named_schemas()
    writer = fastavro.parse_schema(schema, named["writer"])
    options: dict[str, Any] = {}

    def read(stream: IO[bytes]) -> Any:
        return _read_data(stream, writer, named, None, options)

    return read


# A record of most Avro kinds, to check once per process that fastavro's compiled
# decoder (not public API) reads what its public reader reads.
_PROBE_SCHEMA = {
    "type": "record", "name": "Probe", "fields": [
        {"name": "n", "type": "long"}, {"name": "s", "type": "string"},
        {"name": "b", "type": "bytes"}, {"name": "d", "type": "double"},
        {"name": "ok", "type": "boolean"},
        {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["X", "Y"]}},
        {"name": "f", "type": {"type": "fixed", "name": "F", "size": 2}},
        {"name": "a", "type": {"type": "array", "items": "E"}},
        {"name": "m", "type": {"type": "map", "values": ["null", "F", "string"]}},
    ],
}  # fmt: skip
_PROBE_RECORD = {
    "n": -(2**40), "s": "é", "b": b"\x00\xff", "d": 0.5, "ok": True, "e": "Y", "f": b"ab",
    "a": ["X", "Y"], "m": {"k": None, "l": b"cd", "m": "v"},
}  # fmt: skip


@functools.cache
def _fastavro_decoder_reads_as_public() -> bool:
    try:
        schema = fastavro.parse_schema(_PROBE_SCHEMA)
        out = io.BytesIO()
        fastavro.schemaless_writer(out, schema, _PROBE_RECORD)
        stream = io.BytesIO(out.getvalue() * 2)
        read = _fastavro_decoder(schema)
        first, second = read(stream), read(stream)
        return first == second == _PROBE_RECORD and stream.tell() == len(out.getvalue()) * 2
    except Exception:  # another fastavro: its public reader serves
        return False


def _avro_binary_problems(
    read: Callable[[IO[bytes]], Any] | None, messages: Sequence[bytes]
) -> list[str | None]:
    assert read is not None
    stream = io.BytesIO(b"".join(messages))
    out: list[str | None] = []
    end = 0
    for data in messages:
        end += len(data)
        try:
            read(stream)
        except Exception as exc:  # fastavro raises many kinds on malformed input
            out.append(f"not a valid BINARY Avro message: {_short(exc)}")
            stream.seek(end)
            continue
        at = stream.tell()
        if at == end:
            out.append(None)
            continue
        if at < end:
            out.append(f"{end - at} bytes left after the Avro record")
        else:
            out.append(
                f"not a valid BINARY Avro message: the record needs {at - end} bytes more "
                "than the message has"
            )
        stream.seek(end)
    return out


def _avro_json_problems(schema: Any, messages: Sequence[bytes]) -> list[str | None]:
    """All messages through one JSON reader (building a reader costs as much as reading
    a 1 KiB record); where any fails, each on its own, to say which and why."""
    try:
        lines = "\n".join(orjson.dumps(orjson.loads(m)).decode() for m in messages)
        records = list(fastavro.json_reader(io.StringIO(lines), schema))
        if len(records) == len(messages):
            for record in records:
                fastavro.validation.validate(record, schema, raise_errors=True)
            return [None] * len(messages)
    except Exception:  # fastavro raises many kinds on malformed input
        pass
    return [_avro_json_problem(schema, m) for m in messages]


def _avro_json_problem(schema: Any, data: bytes) -> str | None:
    try:
        fastavro.validation.validate(_avro_json(schema, data), schema, raise_errors=True)
    except Exception as exc:  # fastavro raises many kinds on malformed input
        return f"not a valid JSON Avro message: {_short(exc)}"
    return None


def _avro_json(schema: Any, text: bytes) -> Any:
    """One record in Avro's JSON encoding (fastavro reads JSON lines: re-dump to one line)."""
    doc = orjson.loads(text)
    records = list(fastavro.json_reader(io.StringIO(orjson.dumps(doc).decode()), schema))
    if len(records) != 1:
        raise ValueError("expected one JSON value")
    return records[0]


# -- Protocol Buffers ---------------------------------------------------------------------------


def _compile_proto(definition: str) -> tuple[bytes, str, type[Message]]:
    """protoc, as a subprocess: its diagnostics go to stderr, which a call in this
    process could not capture without redirecting the whole process's stderr."""
    with tempfile.TemporaryDirectory(prefix="lakepubsub-proto-") as tmp:
        with open(os.path.join(tmp, PROTO_FILE), "w", encoding="utf-8") as out:
            out.write(definition)
        target = os.path.join(tmp, "schema.desc")
        try:
            run = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "grpc_tools.protoc",
                    f"-I{tmp}",
                    f"--descriptor_set_out={target}",
                    PROTO_FILE,
                ],
                capture_output=True,
                timeout=constants.PROTOC_TIMEOUT_S,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise errors.InvalidArgument(
                "Invalid Protocol Buffer schema: protoc timed out"
            ) from exc
        if run.returncode != 0:
            found = run.stderr.decode(errors="replace").strip().replace(tmp + os.sep, "")
            raise errors.InvalidArgument(f"Invalid Protocol Buffer schema definition: {found}")
        with open(target, "rb") as raw:
            descriptor_set = raw.read()
    files = descriptor_pb2.FileDescriptorSet.FromString(descriptor_set)
    proto = files.file[0]
    if proto.dependency:
        raise errors.InvalidArgument(
            "Invalid Protocol Buffer schema definition: imports are not supported "
            f"({', '.join(proto.dependency)})"
        )
    top = [m.name for m in proto.message_type] + [e.name for e in proto.enum_type]
    if len(proto.message_type) != 1 or len(top) != 1 or proto.service or proto.extension:
        raise errors.InvalidArgument(
            "Invalid Protocol Buffer schema definition: it must define exactly one top-level "
            f"type, a message (found: {', '.join(top) or 'none'})"
        )
    name = f"{proto.package}.{top[0]}" if proto.package else top[0]
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    cls = message_factory.GetMessageClass(pool.FindMessageTypeByName(name))
    return descriptor_set, name, cls


def _proto_problem(cls: type[Message], data: bytes, encoding: str) -> str | None:
    message = cls()
    try:
        if encoding == BINARY:
            message.ParseFromString(data)
            size = message.ByteSize()
            message.DiscardUnknownFields()
            if message.ByteSize() != size:
                return "the message has fields the schema does not define"
        else:
            json_format.Parse(data, message)
    except (DecodeError, json_format.ParseError, UnicodeDecodeError, ValueError) as exc:
        return f"not a valid {encoding} Protocol Buffer message: {_short(exc)}"
    if not message.IsInitialized():
        found: Any = message
        missing = ", ".join(found.FindInitializationErrors())
        return f"required fields are missing: {missing}"
    return None


def _proto_changes(old: Any, new: Any, path: str = "") -> list[str]:
    """Pub/Sub's revision rule for protobuf, field by field; no library states it."""
    problems = []
    old_fields = {f.number: f for f in old.fields}
    new_fields = {f.number: f for f in new.fields}
    for number in sorted(old_fields.keys() | new_fields.keys()):
        before, after = old_fields.get(number), new_fields.get(number)
        if before is None or after is None:
            added = after or before
            assert added is not None
            if not _optional(added):
                verb = "added" if before is None else "removed"
                problems.append(f"field {path}{added.name} = {number} {verb}: it is not optional")
            continue
        if _shape(before) != _shape(after):
            problems.append(f"field {path}{before.name} = {number} changed")
        elif before.message_type is not None and after.message_type is not None:
            problems += _proto_changes(
                before.message_type, after.message_type, f"{path}{before.name}."
            )
    return problems


def _optional(f: FieldDescriptor) -> bool:
    return not f.is_repeated and not f.is_required


def _shape(f: FieldDescriptor) -> tuple[Any, ...]:
    nested = f.message_type.full_name if f.message_type is not None else ""
    enum = f.enum_type.full_name if f.enum_type is not None else ""
    return (f.name, f.type, f.is_repeated, f.is_required, nested, enum)


def _short(exc: Exception) -> str:
    text = str(exc) or type(exc).__name__
    return text if len(text) <= MAX_ERROR_CHARS else text[: MAX_ERROR_CHARS - 3] + "..."
