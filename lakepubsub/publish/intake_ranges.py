"""Which offsets of which topics an intake file holds: its add action's tag, and how
to find the ranges again where the tags are not at hand.

Each commit's add action carries ``{topic_uid: [lo, hi, first_us, last_us]}`` as the
``RANGES_TAG`` tag. delta-rs's snapshot does not return tags, so a process that
loads the intake replays the log's last checkpoint and the commits after it; where
the replay cannot (``checkpoints.Unsupported``), it reads each file's rows.
"""

from __future__ import annotations

import logging

import orjson
import pyarrow as pa

from lakepubsub._lake import Lake, checkpoints, storage_errors

log = logging.getLogger(__name__)

# The add action tag holding {topic_uid: [lo, hi, first_us, last_us]} of a file.
RANGES_TAG = "lakepubsub.topics"

# topic_uid -> (lo, hi, first_us, last_us): offsets [lo, hi), publish times in µs.
Ranges = dict[str, tuple[int, int, int, int]]


def encode(ranges: dict[str, list[int]]) -> dict[str, str]:
    """The tags of an add action for a file holding ``ranges``."""
    return {RANGES_TAG: orjson.dumps(ranges).decode()}


def decode(tag: str | None) -> Ranges | None:
    """A file's topic ranges from its add action's tag (None: no tag)."""
    if not tag:
        return None
    parsed = orjson.loads(tag)
    return {uid: (int(r[0]), int(r[1]), int(r[2]), int(r[3])) for uid, r in parsed.items()}


def from_rows(rows: pa.Table) -> Ranges:
    """A file's topic ranges from its ``topic_uid``, ``offset`` and ``publish_time``."""
    found: Ranges = {}
    stamps = rows["publish_time"].cast(pa.int64())
    for uid, offset, stamp in zip(
        rows["topic_uid"].to_pylist(),
        rows["offset"].to_pylist(),
        stamps.to_pylist(),
        strict=True,
    ):
        lo, hi, first, last = found.get(uid, (offset, offset + 1, stamp, stamp))
        found[uid] = (min(lo, offset), max(hi, offset + 1), min(first, stamp), max(last, stamp))
    return found


def replayed_tags(lake: Lake, uri: str, version: int) -> dict[str, str]:
    """The range tags of the live files at ``version``, from the last checkpoint and
    the commits after it; {} where the log holds what the replay does not model
    (then each file's rows are read)."""
    try:
        with storage_errors(uri):
            replay = checkpoints.Replay(lake.objects, uri)
            replay.advance(version)
    except checkpoints.Unsupported as exc:
        log.info("intake: reading its files for their ranges (%s)", exc)
        return {}
    found: dict[str, str] = {}
    for chunk in replay.state.adds.array().chunks:
        paths = chunk.field("path").to_pylist()
        for path, tags in zip(paths, chunk.field("tags").to_pylist(), strict=True):
            tag = dict(tags or ()).get(RANGES_TAG)
            if tag is not None:
                found[path] = tag
    return found
