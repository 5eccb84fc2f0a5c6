"""``python -m lakepubsub.spark.fetch``: fetch the Spark jars (delta-spark, hadoop-aws, …)
once per machine with a short local session, unless they are cached; print where
they are listed (``lakepubsub.spark.jars``)."""

from __future__ import annotations

import sys

from lakepubsub.spark import jars
from lakepubsub.spark.session import local_session


def main() -> int:
    listed = jars.resolved_jars()
    if listed is None:
        print(f"fetching {', '.join(jars.packages())} (once per machine)", file=sys.stderr)
        local_session("lakepubsub-jars", "local[1]", quiet_fetch=False).stop()
        listed = jars.resolved_jars()
    if listed is None:
        print("the Spark jars could not be resolved", file=sys.stderr)
        return 1
    print(f"{len(listed)} jars listed in {jars.manifest_path()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
