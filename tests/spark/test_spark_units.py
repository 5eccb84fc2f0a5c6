"""The pure parts: writer options, statistics, partition directories, jars, s3a settings."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pyarrow as pa
import pyspark
import pytest

from lakepubsub import errors
from lakepubsub.spark import _commit, _stats, jars
from lakepubsub.spark._options import SourceOptions
from lakepubsub.spark.tables import first_line, s3a_conf, spark_path, timestamp_text

UTC = dt.UTC


def test_options_parse_and_split_storage_options() -> None:
    options = SourceOptions.parse(
        {
            "path": "file:///tmp/t/",
            "aws_endpoint_url": "http://127.0.0.1:9000",
            "AWS_REGION": "us-east-1",
            "txnAppId": "job",
            "txnVersion": "7",
            "partitionBy": '["a","b"]',
        }
    )
    assert options.path == "/tmp/t"
    assert options.storage_options == {
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9000",
        "AWS_REGION": "us-east-1",
    }
    assert (options.txn_app_id, options.txn_version) == ("job", 7)
    assert options.partition_by == ("a", "b")
    remote = SourceOptions.parse({"path": "s3://b/t/"})
    assert remote.path == "s3://b/t" and not remote.is_local


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({}, "'path' option is required"),
        ({"path": "/t", "txnAppId": "a", "txnVersion": "x"}, "must be an integer"),
        ({"path": "/t", "txnAppId": "a", "txnVersion": "-1"}, "must not be negative"),
        ({"path": "/t", "txnAppId": "a"}, "go together"),
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


def test_partition_directories_escape_like_hive() -> None:
    values = {"p": "a b/c=d%", "q": None, "r": "ünï"}
    assert (
        _commit.partition_directory(values)
        == "p=a%20b%2Fc%3Dd%25/q=__HIVE_DEFAULT_PARTITION__/r=ünï/"
    )
    assert _commit.partition_string("") is None
    assert _commit.partition_string(True) == "true"
    assert _commit.partition_string(dt.date(2024, 2, 3)) == "2024-02-03"


def test_jar_coordinates_follow_pyspark() -> None:
    delta, aws, avro = jars.packages()
    assert avro == f"org.apache.spark:spark-avro_2.13:{pyspark.__version__}"
    assert delta == f"io.delta:delta-spark_{jars.spark_minor()}_2.13:{jars.DELTA_VERSION}"
    # hadoop-aws must match the Hadoop jars pyspark ships, byte for byte.
    assert aws == f"org.apache.hadoop:hadoop-aws:{jars.hadoop_version()}"
    assert jars.spark_minor() == "4.2" and jars.hadoop_version() == "3.5.0"


def test_jars_are_named_by_file_once_resolved(tmp_path: Path) -> None:
    assert jars.jar_conf(tmp_path)["spark.jars.packages"] == ",".join(jars.packages())
    files = []
    for coordinate in (*jars.packages(), "com.example:extra:1"):
        group, artifact, version = coordinate.split(":")
        jar = tmp_path / f"{group}_{artifact}-{version}.jar"
        jar.write_bytes(b"")
        files.append(jar)
    jars.remember({"spark.jars": ",".join(f"file://{f}" for f in files[:1])}, tmp_path)
    assert "spark.jars.packages" in jars.jar_conf(tmp_path)  # hadoop-aws missing: not kept
    jars.remember({"spark.jars": ",".join(f"file://{f}" for f in files)}, tmp_path)
    assert jars.jar_conf(tmp_path) == {"spark.jars": ",".join(str(f) for f in files)}
    files[2].unlink()  # a jar gone from the cache: resolve again
    assert "spark.jars.packages" in jars.jar_conf(tmp_path)


def test_lake_uris_become_spark_paths() -> None:
    assert (
        spark_path("s3://bucket/lake/topics/t/messages/") == "s3a://bucket/lake/topics/t/messages"
    )
    assert spark_path("/tmp/lake/catalog") == "file:///tmp/lake/catalog"
    assert spark_path("file:///tmp/lake/x") == "file:///tmp/lake/x"


def test_storage_options_become_s3a_settings() -> None:
    moto = {
        "AWS_ENDPOINT_URL": "http://127.0.0.1:5000",
        "AWS_ACCESS_KEY_ID": "k",
        "AWS_SECRET_ACCESS_KEY": "s",
        "AWS_REGION": "eu-west-1",
        "AWS_ALLOW_HTTP": "true",
    }
    assert s3a_conf(moto, "lake") == {
        "fs.s3a.bucket.lake.endpoint": "http://127.0.0.1:5000",
        "fs.s3a.bucket.lake.access.key": "k",
        "fs.s3a.bucket.lake.secret.key": "s",
        "fs.s3a.bucket.lake.endpoint.region": "eu-west-1",
        "fs.s3a.bucket.lake.path.style.access": "true",
        "fs.s3a.bucket.lake.connection.ssl.enabled": "false",
        "fs.s3a.bucket.lake.aws.credentials.provider": (
            "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"
        ),
    }
    session = s3a_conf({"AWS_ACCESS_KEY_ID": "k", "AWS_SESSION_TOKEN": "t"})
    assert session["fs.s3a.aws.credentials.provider"].endswith("TemporaryAWSCredentialsProvider")
    assert s3a_conf({}) == {}  # AWS's default chain: instance roles, profiles


def test_times_and_errors_for_spark() -> None:
    assert timestamp_text("2024-05-01T10:00:00+02:00") == "2024-05-01 08:00:00.000000"
    assert timestamp_text("2024-05-01T10:00:00") == "2024-05-01 10:00:00.000000"
    with pytest.raises(errors.InvalidArgument, match="ISO 8601"):
        timestamp_text("yesterday")
    spark_error = ValueError("[X] first\nsecond line\n\nJVM stacktrace:\n  at a.b")
    assert first_line(spark_error) == "[X] first second line"
