"""Process metrics, exported in Prometheus format by the API's ``/metrics``."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

_LATENCY_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_ROWS_BUCKETS = (1, 10, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 50_000)

COMMITS = Counter("lakepubsub_delta_commits_total", "Delta commits made by this process", ["table"])
COMMIT_CONFLICTS = Counter(
    "lakepubsub_commit_conflicts_total",
    "Optimistic commits that lost a race and were retried",
    ["table"],
)
CATALOG_FILES_SCANNED = Counter(
    "lakepubsub_catalog_files_scanned_total",
    "Catalog data files a catalog change read (the rest were skipped by their statistics)",
)
COMMIT_SECONDS = Histogram(
    "lakepubsub_commit_seconds", "Delta commit latency", ["table"], buckets=_LATENCY_BUCKETS_S
)
ROWS_PER_COMMIT = Histogram(
    "lakepubsub_rows_per_commit", "Rows written per Delta commit", ["table"], buckets=_ROWS_BUCKETS
)
PEER_CALLS = Counter(
    "lakepubsub_peer_calls_total",
    "Requests handed to the owner of their topic (another API process)",
    ["method"],
)
PEER_UNREACHABLE = Counter(
    "lakepubsub_peer_unreachable_total",
    "Calls to a topic's owner that could not be made (done here instead)",
)
PUBLISHED = Counter("lakepubsub_published_messages_total", "Messages published")
DELIVERED = Counter("lakepubsub_delivered_messages_total", "Messages handed out by pull")
DECODED_HITS = Counter(
    "lakepubsub_decoded_file_hits_total",
    "Reads of a messages file answered from the process's decoded files "
    "(lakepubsub/publish/decoded.py)",
)
DECODED_MISSES = Counter(
    "lakepubsub_decoded_file_misses_total", "Reads of a messages file that decoded it"
)
READ_AHEADS = Counter(
    "lakepubsub_read_ahead_files_total",
    "Messages files decoded ahead of a reader reading a topic's files in order "
    "(lakepubsub/publish/decoded.py)",
)
PULL_ANSWER_MESSAGES = Histogram(
    "lakepubsub_pull_answer_messages",
    "Messages in each answer a dispatcher cycle gives a pull (small answers: many "
    "cycles, each with its fixed cost)",
    buckets=_ROWS_BUCKETS,
)
RELEASED = Counter(
    "lakepubsub_released_deliveries_total",
    "Deliveries given back unseen: their pull, stream or long poll ended before they "
    "reached the client, so they are deliverable again at once",
)
DEADLINE_CHANGES_UNCHANGED = Counter(
    "lakepubsub_deadline_changes_unchanged_total",
    "Ack ids of deadline changes answered without a dispatcher cycle: the change would "
    "leave every lease as it is (planner.change_leaves_leases)",
)
ACKED = Counter("lakepubsub_acked_messages_total", "Acknowledgements applied")
BACKLOG = Gauge(
    "lakepubsub_subscription_backlog_messages",
    "Messages not yet acknowledged, as last seen by this process",
    ["subscription"],
)
