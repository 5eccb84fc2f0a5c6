"""Named limits and defaults, each with the reason it has its value."""

from __future__ import annotations

# Pub/Sub's published quotas for one publish request and one message.
MAX_MESSAGES_PER_PUBLISH = 1_000
MAX_PUBLISH_REQUEST_BYTES = 10_000_000
MAX_ATTRIBUTES_PER_MESSAGE = 100
MAX_ATTRIBUTE_KEY_BYTES = 256
MAX_ATTRIBUTE_VALUE_BYTES = 1_024
MAX_ORDERING_KEY_BYTES = 1_024
# Attribute keys starting with "goog" are reserved, except these, which Google's
# client libraries add themselves (OpenTelemetry's googclient_traceparent).
CLIENT_ATTRIBUTE_PREFIX = "googclient_"

# Pub/Sub resource-name rules: 3-255 characters, starts with a letter.
MIN_NAME_LENGTH = 3
MAX_NAME_LENGTH = 255
MAX_LABELS = 64

# Ack deadlines in seconds, as Pub/Sub: default 10, allowed 10-600 on a
# subscription and 0-600 in modifyAckDeadline (0 means nack).
DEFAULT_ACK_DEADLINE_S = 10
DEFAULT_EXACTLY_ONCE_ACK_DEADLINE_S = 60
MIN_ACK_DEADLINE_S = 10
MAX_ACK_DEADLINE_S = 600

# The shortest message retention Pub/Sub accepts (10 minutes), and its default (7 days).
MIN_RETENTION_S = 600
DEFAULT_RETENTION_S = 7 * 24 * 3600
# A topic created without messageRetentionDuration still keeps its messages this
# long in the lake, for Spark SQL and replay (Pub/Sub's longest default, 7 days);
# only the truncation job deletes messages, and never younger ones.
DEFAULT_TOPIC_HISTORY_S = 7 * 24 * 3600
# The longest messageRetentionDuration a topic takes (100 years, "3153600000s"):
# lakepubsub's documented "forever". Pub/Sub stops at 31 days; a lake need not.
FOREVER_RETENTION_S = 100 * 365 * 24 * 3600

# Pull returns at most this many messages per call, as Pub/Sub.
MAX_PULL_MESSAGES = 1_000

# Delta table properties. A short checkpoint interval keeps opening a hot table
# cheap on S3 (measured: 1.2 s to open after 99 commits without one).
CHECKPOINT_INTERVAL = "10"
# How long delta-rs keeps per-writer transaction ids (used for idempotent publish).
SET_TRANSACTION_RETENTION = "interval 7 days"
LOG_RETENTION = "interval 7 days"
# The intake's log entries carry their files' bytes on S3 (publish/intake_files.py),
# so a week of them would store every message published that week a second time.
# Nothing reads an old intake version: an entry is needed until its file exists
# (written beside it) or its rows moved (minutes), so the intake keeps a day.
INTAKE_LOG_RETENTION = "interval 1 day"
# A lease table replaces a file on every commit (the cursor's at least;
# lakepubsub/delivery/lease_table.py), and every checkpoint carries the tombstone of each
# file removed within delta.deletedFileRetentionDuration, which Delta defaults
# to a week: at the latency case's ~240 lease commits a second, over a hundred
# million rows, each checkpoint rewriting them all. Nothing reads a
# lease table's past versions, so its tombstones, and the removed files the
# compaction job keeps (jobs/compact.py), last this many hours.
LEASE_FILE_RETENTION_HOURS = 1
# On a local filesystem delta-rs lists the whole _delta_log directory on every
# commit, so the tables of a local lake keep only half a minute of log.
# Measured with one single-message publish after another (files compacted
# every 100 commits): with a 7-day log, 15 ms at 1,000 commits rising without
# bound (29 ms at 3,000); with a one-minute log, a plateau at 27 ms; with this
# half minute, 21 ms; with no log kept, 7 ms. Object stores list from the last
# checkpoint, so an S3 lake keeps LOG_RETENTION. delta-rs removes expired log
# files when it writes a checkpoint; older versions of a local lake's tables
# are then no longer readable by version (messages keep their offsets and
# publish times, which is what seek and SQL use).
# Measured again with delta-spark reading (single-message publishes, no
# compaction, loaded 2-core box): after 40,000 commits a 7-day log held 40,028
# files; a delta-rs open took 3.1 s (0.56 s with this half minute, 9,144 files),
# a delta-spark count 10.2 s warm and 47 s cold (1.8 s and 16 s), a publish
# 3.6 ms p50 (3.3 ms). All of it grows with the files in the log, so a local
# lake keeps the short log; time travel past it fails with an error naming the
# oldest version it still reaches (docs/spark.md).
LOCAL_LOG_RETENTION = "interval 30 seconds"
# Tables committed through the direct log (lakepubsub/_lake/deltalog.py) are
# checkpointed by a background thread every CHECKPOINT_INTERVAL commits, but at
# most once per this many seconds per table and process. A checkpoint of a
# table with thousands of small files costs tens of milliseconds, a direct
# commit about one; delta-rs opens a local table replaying its JSON commits since
# the checkpoint at ~0.3 ms each (1,000: 318 ms, 3,000: 863 ms, measured on a
# 2-core machine), an S3 one at a GET each as well, hence the shorter spacing there.
# A local checkpoint and the log cleanup after it are bursts of CPU (a table of
# 10,000 files: ~60 ms to write; the cleanup's delta-rs open and listing, 15-50
# ms) that a 2-core machine serving a publisher and its subscriber feels: at 200
# single-message publishes a second, every 5 s with a cleanup every 10 s, against
# every 15 s with one a minute, the callback p99 was 8.0 against 5.5 ms and 10.6
# against 7.6 ms in two runs of three interleaved pairs
# (bench/results/ab-ckpt-spacing.md). The price: a local open of a table that
# commits 200 times a second may replay 3,000 commits (~0.9 s) instead of 1,000.
LOCAL_CHECKPOINT_SPACING_S = 15.0
S3_CHECKPOINT_SPACING_S = 0.5
# Expired log files are removed after a checkpoint at most this often per table
# and process. delta-rs lists the whole log to do it: on S3 a 7-day log of a
# table committing once a second is ~600 LIST pages ($0.003), so there once a
# day ($0.09 a month per table; every 10 s was ~$780), and the log keeps up to
# a day past its retention. On a local lake once a minute (above): the log keeps
# up to 90 s of commits.
LOG_CLEANUP_SPACING_S = 60.0
S3_LOG_CLEANUP_SPACING_S = 86_400.0
# delta-rs handles the checkpoint thread keeps, one per recently committed table.
CHECKPOINT_HANDLES = 64
# Between checkpoints, the checkpoint thread applies this process's own commits
# to its kept replays (checkpointer.py) about this often, at most
# CHECKPOINT_SLICE commits per table at a time, so a checkpoint is not one long
# stretch of work under the interpreter lock: at 200 single-message commits a
# second, one such stretch every 5 s was the publish-to-delivery p99.
CHECKPOINT_APPLY_S = 0.1
CHECKPOINT_SLICE = 32
CHECKPOINT_PAUSE_S = 0.0005  # between slices: the hot path takes the lock
# Own commit files kept per table for the replay (then it reads them instead).
CHECKPOINT_KNOWN_MAX = 2048
# At interpreter exit, how long to wait for a checkpoint in progress.
CHECKPOINT_EXIT_WAIT_S = 10.0
# A reader that finds no next commit checks that its own version's log file
# still exists (else the log was cleaned up past it and it must reload) at most
# this often: a stat on a local disk is free, an S3 HEAD is not, and an S3
# lake keeps 7 days of log.
LOCAL_LOG_RECHECK_S = 0.0
# Opening a table whose local log grew while delta-rs listed it is retried this
# many times, pausing a multiple of LOG_RACE_PAUSE_S (at most LOG_RACE_PAUSE_MAX_S)
# between tries, about 1 s in all (lakepubsub/_lake/storage.py). A directory
# listing can miss a file created while it runs; 8 tries (0.18 s) were not enough
# for the truncation job under a publisher committing every few ms on a busy CI
# machine.
LOG_RACE_ATTEMPTS = 24
LOG_RACE_PAUSE_MAX_S = 0.05
# A compaction or delete through the direct log moves past at most this many
# versions committed by others before it gives up (and its job retries later).
REBASE_ATTEMPTS = 1000
LOG_RACE_PAUSE_S = 0.005
S3_LOG_RECHECK_S = 600.0


# Optimistic concurrency: a commit that keeps losing races is retried at least
# COMMIT_ATTEMPTS times and for at least COMMIT_BUDGET_S seconds, with back-off.
COMMIT_ATTEMPTS = 12
COMMIT_BUDGET_S = 10.0
COMMIT_BACKOFF_BASE_S = 0.002
COMMIT_BACKOFF_MAX_S = 2.0

# A dispatcher that lost a commit race in the last CONTENTION_MEMORY_S seconds
# pauses after each commit it wins for PACE_FACTOR times that cycle's duration
# (at most PACE_MAX_S): otherwise the winner, whose state is already cached,
# starts its next attempt first and wins again while the others starve.
CONTENTION_MEMORY_S = 5.0
PACE_FACTOR = 2.0
PACE_MAX_S = 0.5

# How stale a process's cached catalog may be on the hot path (publish, pull)
# before it rereads the catalog table. Admin calls always reread it.
CATALOG_MAX_STALENESS_S = 1.0

# Long-polling pull: how long a pull with nothing to deliver waits, and how
# often it rereads storage for messages published by other processes.
PULL_WAIT_S = 10.0
PULL_POLL_INTERVAL_S = 0.1
# How often a process looks for commits nobody told it of (jobs, the CLI with
# --direct, a process that could not reach the owner): on a local lake a look is
# a stat, so as often as a pull polls; on S3 each look is a GET per table, so
# rarely (docs/operations.md, "Choosing the change check").
LOCAL_CHANGE_CHECK_S = PULL_POLL_INTERVAL_S
S3_CHANGE_CHECK_S = 300.0
# Objects this process wrote to S3 lately, kept to be read back without a GET
# (lakepubsub/_lake/objects.Written): a minute of 1 KiB messages at 1,000 a second.
WRITTEN_CACHE_BYTES = 64 * 1024 * 1024
# The flush window (Settings.flush_s): a commit on a local disk costs about a
# millisecond and nothing else, so none there; on S3 every commit is two PUTs
# or more, so a topic or subscription commits at most once per window
# (docs/operations.md, "Choosing the flush window").
LOCAL_FLUSH_MS = 0.0
S3_FLUSH_MS = 250.0
# On S3 Express One Zone (a directory bucket: single-digit ms PUTs at less than a
# quarter of Standard's price) the window is shorter: at 50 ms a process that
# never rests costs what it does on Standard at 250 ms (docs/operations.md).
S3_EXPRESS_FLUSH_MS = 50.0
# Directory buckets (S3 Express One Zone) are named ``<base>--<zone id>--x-s3``.
S3_EXPRESS_BUCKET_SUFFIX = "--x-s3"
# Lease changes of a subscription that is not exactly-once (deliveries, acks,
# deadline changes) wait in memory up to this long before a commit writes them
# together: a crash or a takeover redelivers what changed since the last one, as
# at-least-once allows. A commit is three PUTs on S3 ($0.015 per 1,000): every
# 5 s, $7.8 a month for a subscription that never rests.
# On a local lake a commit costs about a millisecond and no money, but its CPU
# (the rows written, a file, the log entry) was a fifth of a StreamingPull
# drain's per message when every cycle committed: a second holds it to one commit
# per second per busy subscription and redelivers at most a second of acks.
LOCAL_LEASE_FLUSH_MS = 1000.0
S3_LEASE_FLUSH_MS = 30_000.0
# Deferred lease commits a process makes per lease flush window at most, over
# all its subscriptions (lakepubsub/delivery/lease_slots.py): as many as 20 busy
# subscriptions make, 3 PUTs per 1.5 s on S3 ($26 a month); more subscriptions
# stretch each one's window instead of adding PUTs.
LEASE_COMMITS_PER_WINDOW = 20
# The intake (lakepubsub/publish/intake.py): a topic's rows move from the intake to its
# messages table once the oldest has waited this long, or once they reach
# INTAKE_MOVE_BYTES. A move is a commit to the topic's table (two PUTs on S3):
# every 10 minutes, 100 topics cost a third of a PUT a second.
LOCAL_INTAKE_MOVE_S = 10.0
S3_INTAKE_MOVE_S = 600.0
INTAKE_MOVE_BYTES = 8 * 1024 * 1024
# An intake file leaves the intake this long after its last rows moved, so a
# reader whose view of a topic's table is older still finds them there; and a
# process numbering a topic's messages rereads the topic's table when its view
# is older than INTAKE_HEAD_MAX_AGE_S (well inside the grace).
INTAKE_REMOVE_GRACE_S = 600.0
INTAKE_CHECKPOINT_INTERVAL = "100"
INTAKE_HEAD_MAX_AGE_S = 60.0
# While its reread runs (lakepubsub/publish/intake_heads.py), a head read this
# recently still numbers.
INTAKE_HEAD_STALE_S = 300.0
# More deferred lease changes than this are committed at once (memory, and what
# a crash would redeliver).
MAX_DEFERRED_LEASE_CHANGES = 100_000

# Admission control: past this many requests in flight in one process (pulls,
# which wait by design, not counted), or this many request-body bytes, a request
# is answered RESOURCE_EXHAUSTED at once with Retry-After instead of queueing.
# At ~1 ms of server CPU per request, 512 queued requests are ~0.5 s of work.
MAX_INFLIGHT_REQUESTS = 512
MAX_INFLIGHT_BODY_BYTES = 256 * 1024 * 1024
# Requests that wait to be read (in the kernel, behind a busy event loop) are
# not in flight yet; the event loop's lag shows them: probed every
# LOOP_LAG_PROBE_S, a lag past MAX_LOOP_LAG_S refuses requests the same way.
# Lag alone refuses only with at least LAG_REFUSAL_MIN_INFLIGHT requests in
# flight: a loop that lags on a busy machine with a few requests is not flooded.
LOOP_LAG_PROBE_S = 0.05
MAX_LOOP_LAG_S = 0.25
LAG_REFUSAL_MIN_INFLIGHT = 16
OVERLOAD_RETRY_AFTER_S = 1
# gRPC calls in flight per process, StreamingPull streams included; past it
# grpcio answers RESOURCE_EXHAUSTED.
MAX_CONCURRENT_RPCS = 2048
# An idle keep-alive connection is closed after this long: past the idle expiry
# of common clients' pools (httpx and aiohttp 5 s, Go 90 s is the exception),
# so a client never sends on a connection the server is closing.
KEEP_ALIVE_S = 75

# A server collects its young GC generation after this many allocations (not
# CPython's 700; lakepubsub.gc_tuning): a pull of 5,000 messages allocates ~30,000
# objects, nearly all freed by reference counting before a collection sees them.
GC_YOUNG_THRESHOLD = 50_000

# Closing an engine waits this long for each dispatcher's cycle in progress.
CLOSE_WAIT_S = 30.0

# A delivery dispatcher or publisher thread with nothing to do for this long exits.
WORKER_IDLE_EXIT_S = 60.0

# A subscription's last-activity time (for expiration) is written with the next
# commit, or on its own once it is this stale, so idle long polls keep it alive.
ACTIVITY_RESOLUTION_S = 3600

# Microseconds per second, for the *_us timestamp columns.
US_PER_S = 1_000_000

# Pub/Sub's schema limits: a definition of at most 300 KB, at most 20 revisions
# per schema and 10,000 schemas per project.
MAX_SCHEMA_DEFINITION_BYTES = 300 * 1024
MAX_SCHEMA_REVISIONS = 20
MAX_SCHEMAS_PER_PROJECT = 10_000
# Compiled schema revisions a process keeps (publish validates against them).
COMPILED_SCHEMAS_CACHED = 256
# protoc (grpcio-tools) compiling one .proto definition gets this long.
PROTOC_TIMEOUT_S = 30.0
# Decoded messages files a process keeps in memory (lakepubsub/publish/decoded.py):
# what its publishers just wrote and its dispatchers read, so a delivery reads
# no file it wrote and a backlog's file is decoded once, not once per pull.
DECODED_FILES_BYTES = 64 * 1024 * 1024
