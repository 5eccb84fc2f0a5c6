"""``spark-submit jobs/<job>.py ARGS`` (EMR Serverless, cron): the job's command.

Run as a script, a job module is ``__main__``, not ``jobs.<job>``, so importing
the command line (``jobs.cli``, which imports every job module) from it closes
no cycle at run time. It is imported here by name: an import statement in each
job's ``__main__`` block would put a cycle into the package's import graph
(tests/test_house.py), which cannot tell that block from the module's code.
"""

from __future__ import annotations

import importlib
import sys


def main_for(job: str) -> None:
    """Run ``jobs.cli``'s ``run <job> ARGS`` with this process's arguments."""
    cli = importlib.import_module("jobs.cli")
    cli.run.main(args=[job, *sys.argv[1:]], prog_name=f"jobs/{job.replace('-', '_')}.py")
