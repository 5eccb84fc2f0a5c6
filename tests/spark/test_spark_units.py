"""The data source's pure parts: options, statistics, file pruning, partition directories."""

from __future__ import annotations

import datetime as dt
import json

import pyarrow as pa
import pytest
from pyspark.sql.datasource import (
    EqualNullSafe,
    EqualTo,
    Filter,
    GreaterThan,
    In,
    IsNotNull,
    IsNull,
    LessThan,
    Not,
    StringContains,
    StringStartsWith,
)

from lakepubsub import errors
from lakepubsub.spark import _commit, _filters, _scan, _stats
from lakepubsub.spark._options import SourceOptions

UTC = dt.UTC


def test_options_parse_and_split_storage_options() -> None:
    options = SourceOptions.parse(
        {
            "path": "file:///tmp/t/",
            "versionasof": "3",
            "aws_endpoint_url": "http://127.0.0.1:9000",
            "AWS_REGION": "us-east-1",
            "txnAppId": "job",
            "txnVersion": "7",
            "partitionBy": '["a","b"]',
        }
    )
    assert options.path == "/tmp/t"
    assert options.version == 3
    assert options.storage_options == {
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9000",
        "AWS_REGION": "us-east-1",
    }
    assert (options.txn_app_id, options.txn_version) == ("job", 7)
    assert options.partition_by == ("a", "b")
    assert not options.push_filters
    when = SourceOptions.parse({"path": "s3://b/t", "timestampAsOf": "2024-01-02 03:04:05"})
    assert when.timestamp == dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert when.path == "s3://b/t" and not when.is_local


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({}, "'path' option is required"),
        ({"path": "/t", "versionAsOf": "x"}, "must be an integer"),
        ({"path": "/t", "versionAsOf": "1", "timestampAsOf": "2024-01-01"}, "not both"),
        ({"path": "/t", "txnAppId": "a"}, "go together"),
        ({"path": "/t", "timestampAsOf": "yesterday"}, "bad timestampAsOf"),
        ({"path": "/t", "filters": "[1]"}, "JSON list"),
    ],
)
def test_bad_options(options: dict[str, str], message: str) -> None:
    with pytest.raises(errors.InvalidArgument, match=message):
        SourceOptions.parse(options)


def test_stats_bounds_hold_after_truncation() -> None:
    schema = pa.schema(
        [
            ("n", pa.int64()),
            ("s", pa.string()),
            ("t", pa.timestamp("us", tz="UTC")),
            ("f", pa.float64()),
            ("m", pa.map_(pa.string(), pa.string())),
        ]
    )
    stats = _stats.FileStats(schema)
    long = "x" * 40
    t1 = dt.datetime(2024, 1, 1, 0, 0, 0, 1_500, tzinfo=UTC)
    t2 = dt.datetime(2024, 1, 1, 0, 0, 1, 999_001, tzinfo=UTC)
    stats.update(
        pa.record_batch(
            [
                pa.array([5, None, 3]),
                pa.array(["b", long, None]),
                pa.array([t1, t2, None], schema.field("t").type),
                pa.array([1.0, float("nan"), None]),
                pa.array([[("k", "v")], None, []], schema.field("m").type),
            ],
            schema=schema,
        )
    )
    stats.update(
        pa.record_batch(
            [
                pa.array([9, 1, 2]),
                pa.array(["a", "c", "d"]),
                pa.array([None] * 3, schema.field("t").type),
                pa.array([0.0] * 3),
                pa.array([None] * 3, schema.field("m").type),
            ],
            schema=schema,
        )
    )
    got = json.loads(stats.to_json())
    assert got["numRecords"] == 6
    assert got["minValues"] == {"n": 1, "s": "a", "t": "2024-01-01T00:00:00.001Z"}
    # The 40-character maximum becomes a 32-character prefix that still sorts above it.
    assert got["maxValues"]["s"] == "x" * 32 + "\U0010ffff" > long
    assert got["maxValues"]["t"] == "2024-01-01T00:00:02.000Z"
    assert got["nullCount"] == {"n": 1, "s": 1, "t": 4, "f": 1, "m": 4}


def test_long_string_maximum_keeps_an_upper_bound() -> None:
    stats = _stats.FileStats(pa.schema([("s", pa.string())]))
    long = "y" * 40
    stats.update(pa.record_batch([pa.array(["a", long])], names=["s"]))
    bound = json.loads(stats.to_json())["maxValues"]["s"]
    assert len(bound) == _stats.STRING_PREFIX_CHARS + 1 and bound > long


def file(
    low: object, high: object, nulls: int | None = 0, rows: int | None = 10
) -> _filters.ColumnStats:
    return _filters.ColumnStats(low, high, nulls, rows)


T = dt.datetime(2024, 1, 1, 0, 0, 1, 234_000, tzinfo=UTC)


@pytest.mark.parametrize(
    ("flt", "stats", "may"),
    [
        (EqualTo(("n",), 5), file(1, 4), False),
        (EqualTo(("n",), 4), file(1, 4), True),
        (GreaterThan(("n",), 4), file(1, 4), False),
        (LessThan(("n",), 1), file(1, 4), False),
        (In(("n",), (0, 9)), file(1, 4), False),
        (In(("n",), (0, 3)), file(1, 4), True),
        (IsNull(("n",)), file(1, 4, nulls=0), False),
        (IsNull(("n",)), file(1, 4, nulls=None), True),
        (IsNotNull(("n",)), file(None, None, nulls=10), False),
        (EqualTo(("n",), 1), file(None, None, nulls=10), False),
        (Not(EqualTo(("n",), 1)), file(None, None, nulls=10), False),
        (Not(EqualNullSafe(("n",), 1)), file(None, None, nulls=10), True),
        (Not(IsNull(("n",))), file(None, None, nulls=10), False),
        (EqualTo(("n",), 1), file(None, None, nulls=None, rows=None), True),
        (StringStartsWith(("s",), "m01"), file("m02", "m09"), False),
        (StringStartsWith(("s",), "m0"), file("m02", "m09"), True),
        (StringContains(("s",), "zz"), file("a", "b"), True),
        # Timestamp maxima are truncated to milliseconds: 1.2345 s may be in the file.
        (GreaterThan(("t",), T + dt.timedelta(microseconds=500)), file(T, T), True),
        (GreaterThan(("t",), T + dt.timedelta(milliseconds=2)), file(T, T), False),
        (EqualTo(("n",), "text"), file(1, 4), True),  # incomparable stats prune nothing
    ],
)
def test_may_match(flt: Filter, stats: _filters.ColumnStats, may: bool) -> None:
    assert _filters.may_match(flt, stats) is may


@pytest.mark.parametrize(
    ("flt", "kind"),
    [
        (GreaterThan(("f",), 1.0), pa.float64()),  # NaN ordering differs from Spark's
        (GreaterThan(("b",), True), pa.bool_()),
        (EqualTo(("n",), "1"), pa.int64()),
        (EqualTo(("n",), 2**70), pa.int64()),
        (EqualTo(("a", "b"), 1), pa.int64()),
        (StringStartsWith(("n",), "1"), pa.int64()),
        (In(("n",), (1, None)), pa.int64()),
        (GreaterThan(("t",), dt.datetime(2024, 1, 1)), pa.timestamp("us", tz="UTC")),
    ],
)
def test_filters_left_to_spark(flt: Filter, kind: pa.DataType) -> None:
    with pytest.raises(_filters.UnsupportedFilter):
        _filters.to_expression(flt, kind)


def test_partition_directories_escape_like_hive() -> None:
    values = {"p": "a b/c=d%", "q": None, "r": "ünï"}
    assert (
        _commit.partition_directory(values)
        == "p=a%20b%2Fc%3Dd%25/q=__HIVE_DEFAULT_PARTITION__/r=ünï/"
    )
    assert _commit.partition_string("") is None
    assert _commit.partition_string(True) == "true"
    assert _commit.partition_string(dt.date(2024, 2, 3)) == "2024-02-03"


def test_pack_groups_small_files_like_spark() -> None:
    mib = 1024 * 1024
    sizes = [10, 60, 1, 60, 10]
    files = [_scan.DataFile(f"f{i}", size * mib, None, ()) for i, size in enumerate(sizes)]

    def paths(groups: list[tuple[_scan.DataFile, ...]]) -> list[list[str]]:
        return [[f.path for f in g] for g in groups]

    # Largest first; each file also costs 4 MiB to open.
    assert paths(_scan.pack(files, max_bytes=128 * mib, min_partitions=1)) == [
        ["f1", "f3"],
        ["f0", "f4", "f2"],
    ]
    # Smaller groups when there are more cores than groups: 161 MiB / 4 cores.
    assert paths(_scan.pack(files, max_bytes=128 * mib, min_partitions=4)) == [
        ["f1"],
        ["f3"],
        ["f0", "f4", "f2"],
    ]
    assert len(_scan.pack(files, max_bytes=0, min_partitions=1)) == 5
    assert _scan.pack([], max_bytes=128 * mib, min_partitions=2) == []
