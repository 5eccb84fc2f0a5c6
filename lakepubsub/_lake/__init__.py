"""The lake: where tables live and how to reach them.

Nothing outside this package builds a table path or storage options by hand.
"""

from lakepubsub._lake.actions import DataFile
from lakepubsub._lake.checkpointer import settle_checkpoints
from lakepubsub._lake.deltalog import TableLog
from lakepubsub._lake.storage import Lake, storage_errors

__all__ = ["DataFile", "Lake", "TableLog", "settle_checkpoints", "storage_errors"]
