"""Garbage collection: expired subscriptions and snapshots, and orphaned table directories.

    spark-submit jobs/gc.py [--lake URI] [--orphan-age-s N] [--dry-run]
    lakepubsub jobs run gc [--lake URI] [--orphan-age-s N] [--dry-run]

- A subscription whose ``expirationPolicy.ttl`` has passed without client
  activity is deleted (as ``DELETE …/subscriptions/{s}`` would). Activity is
  the cursor's ``active_us``, which the core writes at most
  ``constants.ACTIVITY_RESOLUTION_S`` late, so a subscription is deleted only
  once that much more than its TTL has passed: an active one is never deleted,
  an idle one lives at most that much longer than its TTL.
- A snapshot past its expire time is deleted (Pub/Sub's 7-day snapshot lifetime).
- A directory under ``topics/``, ``subscriptions/`` or ``snapshots/`` whose uid
  no catalog entry names, and in which nothing changed for ``orphan_age_s``
  (default one hour), is removed: left behind by a crash between creating a
  table and committing its catalog entry, or by a failed removal after a
  delete. The age check keeps a resource being created right now safe.

GC needs no Spark; it runs under spark-submit all the same, like the others.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from jobs import runs
from jobs.common import JobContext, Stopwatch, newest_change_s
from jobs.script import main_for
from lakepubsub import constants, errors
from lakepubsub.resources import catalog
from lakepubsub.resources.names import SnapshotName, SubscriptionName

log = logging.getLogger("lakepubsub.jobs.gc")

# An orphan directory must have been untouched this long before it is removed.
ORPHAN_AGE_S = 3600.0
DIRECTORIES = ("topics", "subscriptions", "snapshots")


@dataclass(frozen=True)
class GcOptions:
    orphan_age_s: float = ORPHAN_AGE_S
    dry_run: bool = False


@dataclass
class GcReport:
    job: str = "gc"
    dry_run: bool = False
    subscriptions_deleted: list[str] = field(default_factory=list)
    snapshots_deleted: list[str] = field(default_factory=list)
    orphans_removed: list[str] = field(default_factory=list)  # "topics/{uid}"
    errors: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def summary(self) -> dict[str, int]:
        return {
            "subscriptions_deleted": len(self.subscriptions_deleted),
            "snapshots_deleted": len(self.snapshots_deleted),
            "orphans_removed": len(self.orphans_removed),
            "failed": len(self.errors),
        }


def run(ctx: JobContext, options: GcOptions | None = None) -> GcReport:
    options = options or GcOptions()
    watch = Stopwatch()
    report = GcReport(dry_run=options.dry_run)
    # Listed before the catalog is read: a directory created after the listing
    # is not looked at, one created before it is either in the catalog or young.
    listed = {d: ctx.lake.list_dirs(d) for d in DIRECTORIES}
    subs = ctx.engine.all_subscriptions()
    snapshots = ctx.engine.catalog.view().of_kind(catalog.SNAPSHOT)
    ctx.progress.begin("gc", len(subs) + len(snapshots) + sum(len(v) for v in listed.values()))
    now_us = ctx.now_us()
    for sub in subs:
        try:
            if _expired(ctx, sub.name, sub.expiration_ttl_s, now_us):
                if not options.dry_run:
                    ctx.engine.delete_subscription(sub.name)
                report.subscriptions_deleted.append(sub.name.path)
                log.info("deleted expired subscription %s", sub.name.path)
        except errors.NotFound:
            pass  # deleted by someone else meanwhile
        except errors.LakePubSubError as exc:
            report.errors.append(f"{sub.name.path}: {exc}")
        ctx.progress.advance(sub.name.path)
    for entry in snapshots:
        name = SnapshotName(entry.project, entry.name)
        if int(entry.spec.get("expire_time_us", 0)) <= now_us:
            try:
                if not options.dry_run:
                    ctx.engine.delete_snapshot(name)
                report.snapshots_deleted.append(name.path)
            except errors.NotFound:
                pass
            except errors.LakePubSubError as exc:
                report.errors.append(f"{name.path}: {exc}")
        ctx.progress.advance(name.path)
    _sweep(ctx, listed, options, report)
    ctx.progress.end()
    report.seconds = watch.seconds()
    runs.record(ctx, report)
    return report


def _expired(ctx: JobContext, name: SubscriptionName, ttl_s: int | None, now_us: int) -> bool:
    if ttl_s is None:
        return False
    state = ctx.engine.subscription_state(name)
    idle_us = now_us - state.cursor.active_us
    return idle_us > (ttl_s + constants.ACTIVITY_RESOLUTION_S) * constants.US_PER_S


def _sweep(
    ctx: JobContext, listed: dict[str, list[str]], options: GcOptions, report: GcReport
) -> None:
    known = {e.uid for e in ctx.engine.catalog.view(max_staleness_s=0).entries.values()}
    now_s = ctx.now_us() / constants.US_PER_S
    for directory, uids in listed.items():
        for uid in uids:
            ctx.progress.advance(f"{directory}/{uid}")
            if uid in known:
                continue
            try:
                newest = newest_change_s(ctx.lake, directory, uid)
            except Exception as exc:  # storage trouble: leave it for the next run
                report.errors.append(f"{directory}/{uid}: {exc}")
                continue
            if newest is None or now_s - newest < options.orphan_age_s:
                continue  # gone already (deleted above), or possibly being created
            if not options.dry_run:
                ctx.lake.remove_tree(directory, uid)
            report.orphans_removed.append(f"{directory}/{uid}")
            log.info("removed orphaned %s/%s", directory, uid)


if __name__ == "__main__":
    main_for("gc")
