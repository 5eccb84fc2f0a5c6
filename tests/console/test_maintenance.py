"""What the lake page says the jobs did, against a real lake (local and S3): a topic's
last compaction and last delete of old messages, read from its commits' commitInfo
while the console runs and by looking back, and each job's last run as the job
recorded it (jobs/runs.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from support import LakeSpec

from api.console import sampler as sampler_module
from api.console.maintenance import kept_from
from api.console.sampler import Sampler
from jobs import compact, gc, truncate
from jobs.common import JobContext
from lakepubsub import Engine
from lakepubsub.messages import PublishMessage
from lakepubsub.resources import catalog as cat
from lakepubsub.resources.names import SubscriptionName, TopicName
from lakepubsub.resources.subscriptions import Subscription
from lakepubsub.resources.topics import Topic
from lakepubsub.settings import wall_clock_us

TOPIC = TopicName("demo", "orders")
SUB = SubscriptionName("demo", "orders-sub")
FILES = 10
# The truncation job deletes only messages past the topic's retention (7 days).
EIGHT_DAYS_US = 8 * 24 * 3600 * 1_000_000


def _topic_uid(engine: Engine) -> str:
    entry = engine.catalog.view().get(cat.TOPIC, TOPIC.project, TOPIC.id)
    assert entry is not None
    return entry.uid


@pytest.fixture
def engine(lake: LakeSpec) -> Iterator[Engine]:
    """Publishes commit to the topic's own table (one file each), on S3 too, where they
    would go to the intake by default."""
    with Engine(lake.settings(intake=False)) as eng:
        yield eng


def test_compaction_and_delete_are_found_in_the_log_and_the_runs_recorded(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sampler_module, "JOB_RUNS_READ_S", 0.0)  # on S3 too, every sample
    engine.create_topic(Topic(TOPIC))
    engine.create_subscription(Subscription(SUB, TOPIC))
    for i in range(FILES):  # one file each
        engine.publish(TOPIC, [PublishMessage(f"m{i}".encode())])
    uid = _topic_uid(engine)
    sampler = Sampler(engine)
    sampler.sample()
    series = sampler.series(uid)
    assert series is not None and series.jobs is not None
    assert series.jobs.compaction is None and series.jobs.delete is None
    assert series.jobs.complete and series.jobs.looked_back >= FILES  # every commit read
    assert sampler.job_runs == {}

    ctx = JobContext(engine.settings)
    compact.run(ctx, compact.CompactOptions(min_small_files=2, vacuum=False))
    sampler.sample()  # the compaction commit is found going forward
    seen = sampler.series(uid).jobs  # type: ignore[union-attr]
    assert seen is not None and seen.compaction is not None
    assert (seen.compaction.files_removed, seen.compaction.files_added) == (FILES, 1)
    assert sampler.job_runs["compact"]["summary"]["compacted"] >= 1

    # Everything acknowledged and the clock past the retention: the truncation job
    # deletes all but the newest message (the head is read from it).
    engine.commit_offset(SUB, FILES)
    later = JobContext(engine.settings, clock_us=lambda: wall_clock_us() + EIGHT_DAYS_US)
    truncate.run(later)
    gc.run(later)
    sampler.sample()
    seen = sampler.series(uid).jobs  # type: ignore[union-attr]
    assert seen is not None and seen.delete is not None and kept_from(seen.delete) == FILES - 1
    topics = sampler.job_runs["truncate"]["report"]["topics"]
    assert [(t["topic"], t["kept_from"], t["rows_deleted"]) for t in topics] == [
        (TOPIC.path, FILES - 1, FILES - 1)
    ]
    assert "newest message always stays" in topics[0]["kept_because"]
    assert sampler.job_runs["gc"]["summary"]["failed"] == 0

    # A console started later finds both by looking back through the log.
    fresh = Sampler(engine)
    fresh.sample()
    again = fresh.series(uid).jobs  # type: ignore[union-attr]
    assert again is not None and again.compaction == seen.compaction
    assert again.delete == seen.delete
