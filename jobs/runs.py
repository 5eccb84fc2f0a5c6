"""Each maintenance job's last run, kept in the lake for operators (the console's lake page).

A run of ``compact``, ``truncate`` or ``gc`` ends by replacing one JSON object,
``Lake.job_run_uri(job)`` (``{root}/jobs/{job}.json``): when it finished, how long
it took, its summary and its whole report (what ``lakepubsub jobs run`` prints:
for truncation, each topic's oldest kept offset and why it is kept). Only the
last run is kept; a run that crashed writes nothing, and its log says why.
Nothing reads it to decide anything.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from typing import Any, Protocol

from jobs.common import JobContext
from lakepubsub import errors
from lakepubsub._lake import storage_errors

log = logging.getLogger("lakepubsub.jobs")


class Report(Protocol):
    job: str
    seconds: float

    def summary(self) -> dict[str, int]: ...


def record(ctx: JobContext, report: Report) -> None:
    """Keep ``report`` as the job's last run; a failure to keep it is logged, not raised
    (the run's work is done either way)."""
    lake = ctx.lake
    uri = lake.job_run_uri(report.job)
    body: dict[str, Any] = {
        "job": report.job,
        "finished_us": ctx.now_us(),
        "seconds": report.seconds,
        "summary": report.summary(),
        "report": dataclasses.asdict(report),  # type: ignore[call-overload]
    }
    try:
        with storage_errors(uri):
            if not lake.is_s3:
                os.makedirs(os.path.dirname(uri), exist_ok=True)
            lake.objects.replace(uri, json.dumps(body, default=str).encode())
    except errors.LakePubSubError as exc:
        log.warning("%s: could not record this run: %s", report.job, exc)
