"""Pub/Sub JSON field values both doors read and write: protobuf durations,
timestamps and enums, base64 data, update masks, and the fields of features that
are not built."""

from __future__ import annotations

import base64
import binascii
import re
from datetime import UTC, datetime

# pybase64: SIMD base64 (1 KiB: 0.5 against binascii's 2.8 us to decode, 0.2 against
# 1.2 to encode); the same alphabet, padding and validation rules.
from pybase64 import b64decode

from api import models as m
from lakepubsub import errors
from lakepubsub.constants import US_PER_S

_DURATION = re.compile(r"(-?\d+(?:\.\d{1,9})?)s")


def parse_duration_s(text: str, field: str) -> float:
    """A protobuf Duration in JSON: ``"3.5s"``."""
    match = _DURATION.fullmatch(text.strip()) if isinstance(text, str) else None
    if match is None:
        raise errors.InvalidArgument(f"{field}: invalid duration {text!r}; expected e.g. '600s'")
    return float(match.group(1))


def format_duration(seconds: float) -> str:
    return f"{int(seconds)}s" if float(seconds).is_integer() else f"{seconds:.9f}".rstrip("0") + "s"


def parse_time_us(text: str, field: str) -> int:
    """An RFC 3339 timestamp ("2026-01-02T03:04:05.123Z") in microseconds."""
    try:
        stamp = datetime.fromisoformat(text)
    except (TypeError, ValueError) as exc:
        raise errors.InvalidArgument(f"{field}: invalid RFC 3339 time {text!r}") from exc
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=UTC)
    return int(stamp.timestamp() * US_PER_S)


def decode_data(text: str | None, where: str) -> bytes:
    """Standard or URL-safe base64, padding optional, as protobuf JSON accepts."""
    if not text:
        return b""
    if not isinstance(text, str):
        raise errors.InvalidArgument(f"{where}.data must be a base64 string")
    try:  # the common case: standard alphabet, padded
        return b64decode(text, validate=True)
    except (binascii.Error, ValueError):  # ValueError: non-ASCII text
        pass
    cleaned = text.replace("-", "+").replace("_", "/")
    cleaned += "=" * (-len(cleaned) % 4)
    try:
        return base64.b64decode(cleaned, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise errors.InvalidArgument(f"{where}.data: invalid base64") from exc


# -- Pub/Sub fields whose features are not built ------------------------------------------

# Field (protobuf name) -> the feature it asks for. A request that sets one is refused,
# on create and on update alike, rather than answered as if the feature were there.
UNBUILT_FIELDS = {
    "message_storage_policy": "message storage policies",
    "kms_key_name": "customer-managed encryption keys",
    "ingestion_data_source_settings": "import topics (ingestion data sources)",
    "message_transforms": "message transforms",
    "tags": "resource tags",
    "bigquery_config": "BigQuery subscriptions",
    "cloud_storage_config": "Cloud Storage subscriptions",
    "bigtable_config": "Bigtable subscriptions",
}


def unbuilt(field: str, kind: str) -> errors.InvalidArgument:
    json_name = re.sub(r"_(\w)", lambda m: m.group(1).upper(), field)
    return errors.InvalidArgument(
        f"{kind}.{json_name}: {UNBUILT_FIELDS[field]} are not built in lakepubsub; "
        "leave the field out"
    )


def refuse_unbuilt(body: m.Model, kind: str) -> None:
    """INVALID_ARGUMENT if ``body`` sets a field of a feature that is not built. Empty
    values ask for nothing and pass, except a delivery config: any config, even an
    empty one, would make a BigQuery (…) subscription."""
    for field in UNBUILT_FIELDS.keys() & body.model_fields_set:
        value = getattr(body, field)
        if value is None or (value in ("", [], {}) and not field.endswith("_config")):
            continue
        raise unbuilt(field, kind)


ENCODINGS = ("ENCODING_UNSPECIFIED", "JSON", "BINARY")


def enum_name(value: str | int | None, names: tuple[str, ...], field: str) -> str:
    """The name of a protobuf enum value given by name or number; index 0 when absent."""
    if value is None or value == "":
        return names[0]
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < len(names):
        return names[value]
    if isinstance(value, str) and value in names:
        return value
    raise errors.InvalidArgument(f"{field}: invalid value {value!r}; expected one of {names}")


def snake(path: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", path).lower()


def update_mask(mask: str, known: dict[str, str], kind: str) -> list[str]:
    paths = [snake(p.strip()) for p in mask.split(",") if p.strip()]
    if not paths:
        raise errors.InvalidArgument("updateMask must name at least one field")
    out = []
    for path in paths:
        root = path.split(".")[0]
        if root in UNBUILT_FIELDS:
            raise unbuilt(root, kind)
        if root not in known:
            raise errors.InvalidArgument(f"updateMask: unknown {kind} field {path!r}")
        out.append(known[root])
    return out
