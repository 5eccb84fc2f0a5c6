"""The JVM side of lakepubsub's Spark: delta-spark, hadoop-aws and spark-avro, fetched
once per machine.

The first session on a machine names the Maven packages (``spark.jars.packages``);
Spark's Ivy downloads them with their dependencies into its cache (``~/.ivy2.5.2``)
and the jar list it resolved is written next to that cache. Later sessions name
those jar files directly (``spark.jars``): no resolution, no Ivy report on
stderr, no network. ``python -m lakepubsub.spark.fetch`` does the first fetch
ahead of time (``make test`` runs it); ``local_session`` runs it in a child
process when nothing is cached, with Ivy's report (about 140 lines) sent to a
log file instead of the terminal.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pyspark

from lakepubsub import errors

# delta-spark for this Spark's major.minor and Scala 2.13. The pinned Python
# package is 4.4.1, but Maven Central has no 4.4.1 jars (only 4.4.0, the same
# Scala/Java API the Python wrapper calls), so the jars are 4.4.0.
DELTA_VERSION = "4.4.0"
SCALA_VERSION = "2.13"
# hadoop-aws must be the exact Hadoop version Spark ships (hadoop-client-api-*.jar).
DEFAULT_HADOOP_VERSION = "3.5.0"
# Dependencies of delta-spark's kernel modules that Spark already ships in a
# newer version: left out, so the JVM sees one copy of each class.
EXCLUDES = (
    "org.apache.hadoop:hadoop-client-runtime",
    "org.apache.hadoop:hadoop-client-api",
    "org.apache.parquet:parquet-hadoop",
    "com.fasterxml.jackson.core:jackson-databind",
    "com.fasterxml.jackson.core:jackson-core",
    "com.fasterxml.jackson.core:jackson-annotations",
    "org.slf4j:slf4j-api",
    "org.apache.logging.log4j:log4j-api",
    "org.apache.logging.log4j:log4j-core",
    "org.apache.logging.log4j:log4j-slf4j2-impl",
    "org.roaringbitmap:RoaringBitmap",
    "com.google.code.findbugs:jsr305",
)
# Spark's Ivy home when spark.jars.ivy is not set.
DEFAULT_IVY_HOME = Path.home() / ".ivy2.5.2"
# What the first fetch downloads (measured: Ivy reports 688,391 kB for the 15 jars).
FETCH_SIZE_TEXT = "about 690 MB"
FETCH_LOG = "lakepubsub-fetch.log"
_HADOOP_JAR = re.compile(r"hadoop-client-api-(\d+\.\d+\.\d+)\.jar$")


def spark_minor() -> str:
    return ".".join(pyspark.__version__.split(".")[:2])


def hadoop_version() -> str:
    """The Hadoop version of the jars pyspark ships."""
    jars = Path(pyspark.__file__).parent / "jars"
    for jar in jars.glob("hadoop-client-api-*.jar"):
        found = _HADOOP_JAR.search(jar.name)
        if found:
            return found.group(1)
    return DEFAULT_HADOOP_VERSION


def packages() -> tuple[str, ...]:
    """Maven coordinates of delta-spark, hadoop-aws and Spark's own spark-avro
    (``from_avro``, for the typed views) for this pyspark. spark-protobuf is not
    among them: the Maven registry this project reaches has no spark-protobuf
    artifact of any version (measured: 404 for 3.5.0, 4.0.0 and 4.2.0), so the
    typed views decode protobuf with the protobuf runtime (docs/spark.md)."""
    return (
        f"io.delta:delta-spark_{spark_minor()}_{SCALA_VERSION}:{DELTA_VERSION}",
        f"org.apache.hadoop:hadoop-aws:{hadoop_version()}",
        f"org.apache.spark:spark-avro_{SCALA_VERSION}:{pyspark.__version__}",
    )


def manifest_path(ivy_home: Path | None = None) -> Path:
    """Where the resolved jar list is kept, named by what was asked for."""
    key = hashlib.sha256("\n".join((*packages(), *EXCLUDES)).encode()).hexdigest()[:16]
    return (ivy_home or DEFAULT_IVY_HOME) / f"lakepubsub-jars-{key}.txt"


def resolved_jars(ivy_home: Path | None = None) -> list[str] | None:
    """The jar files an earlier session resolved, if every one is still there."""
    try:
        lines = manifest_path(ivy_home).read_text().split()
    except FileNotFoundError:
        return None
    if not lines or not all(os.path.isfile(path) for path in lines):
        return None
    return lines


def jar_conf(ivy_home: Path | None = None) -> dict[str, str]:
    """Spark settings that put the jars on the classpath: by file when known, else by package."""
    jars = resolved_jars(ivy_home)
    if jars is not None:
        return {"spark.jars": ",".join(jars)}
    return {
        "spark.jars.packages": ",".join(packages()),
        "spark.jars.excludes": ",".join(EXCLUDES),
        # Named, so the JVM's Ivy home is the one this module lists (also under another HOME).
        "spark.jars.ivy": str(ivy_home or DEFAULT_IVY_HOME),
    }


def fetch_quietly() -> None:
    """Fetch the jars in a child process (``python -m lakepubsub.spark.fetch``), Ivy's
    report going to ``FETCH_LOG`` in the Ivy home; say so in one line on stderr.
    ``FailedPrecondition`` naming the log when the fetch failed."""
    DEFAULT_IVY_HOME.mkdir(parents=True, exist_ok=True)
    log_path = DEFAULT_IVY_HOME / FETCH_LOG
    print(
        f"Fetching Spark's jars, {FETCH_SIZE_TEXT} (once per machine; log: {log_path})…",
        file=sys.stderr,
        flush=True,
    )
    with open(log_path, "wb") as log:
        done = subprocess.run(
            [sys.executable, "-m", "lakepubsub.spark.fetch"],
            stdout=log,
            stderr=subprocess.STDOUT,
            check=False,
        )
    if done.returncode != 0 or resolved_jars() is None:
        raise errors.FailedPrecondition(f"fetching Spark's jars failed; see {log_path}")


def remember(conf: Mapping[str, str], ivy_home: Path | None = None) -> None:
    """After a session resolved the packages, keep the jar list it got (``spark.jars``)."""
    listed = [p.removeprefix("file://") for p in conf.get("spark.jars", "").split(",") if p]
    # Ivy names a resolved jar {group}_{artifact}-{version}.jar.
    stems = [c.rsplit(":", 1)[0].replace(":", "_") + "-" for c in packages()]
    names = [os.path.basename(p) for p in listed]
    if not all(any(n.startswith(stem) for n in names) for stem in stems):
        return
    path = manifest_path(ivy_home)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(f".{os.getpid()}.tmp")
    temporary.write_text("\n".join(listed) + "\n")
    os.replace(temporary, path)
