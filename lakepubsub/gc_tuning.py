"""The memory of a server process: the garbage collector and Arrow's allocator.

A server's heap is mostly what start-up made: modules, the FastAPI and gRPC
apps, about 150,000 objects the cyclic collector tracks. Its requests make
many short-lived containers: a StreamingPull batch of 5,000 messages makes some
30,000 tuples, dicts and messages, nearly all freed by reference counting.
With CPython's defaults (a young collection every 700 allocations, a full one
whenever the older generations grew by a quarter) the full collections scan
every start-up object again. Measured on a gRPC drain of 300,000 messages: 34
full collections of about 70 ms each, and GC a quarter of the server's CPU.

So a server, once started, freezes what start-up made (``gc.freeze``: those
objects are never scanned again; they are still freed when their last
reference goes) and collects the young generation after
``Settings.gc_young_threshold`` allocations instead of 700. Cyclic garbage is
still collected, only less often; reference counting frees everything else at
once, as always.

A server also allocates Arrow memory with jemalloc instead of pyarrow's default,
mimalloc. A publish commit of a few thousand messages allocates buffers of
megabytes that are freed before the next commit; mimalloc gives their pages
back to the kernel and takes fresh ones, which the kernel zeroes
(``clear_page_erms`` was a quarter of a perf profile). Measured on a 2-core
machine: ``MessagesTable.append`` of 3,000 messages of 1 KiB in a loop, four
alternating runs each, cost 6.3-6.9 us per message with mimalloc, 2.3-4.9 with
jemalloc and 2.3-3.7 with the system allocator; in the gRPC bench's batched
publish case (8 Go publishers, 200,000 messages), three alternating pairs,
the publisher thread fell from 6.7-8.3 to 4.3-4.8 us per message and the
server from 15.4-18.1 to 13.6-14.4; the StreamingPull drain did not change.
Arrow's own ``ARROW_DEFAULT_MEMORY_POOL``, when set, chooses instead.

jemalloc hands pages a process freed back to the kernel once they stayed unused
for its decay time, which pyarrow's build keeps short. Each commit's buffers are
freed and made again at once, so short decay gave most of them back between
commits, to be faulted in again. With ``JEMALLOC_DECAY_MS`` (10 s), the committer's
page faults in the gRPC bench's batched publish of 1,000,000 messages went from
150,855 to 67,397 and its CPU from 2.34 to 1.96 µs a message. Memory a burst freed
stays mapped that much longer.
"""

from __future__ import annotations

import gc
import os

import pyarrow as pa

JEMALLOC_DECAY_MS = 10_000


def settle(young_threshold: int) -> None:
    """Freeze the start-up heap, set the young generation's threshold (0 leaves
    CPython's) and choose Arrow's allocator."""
    arrow_allocator()
    gc.collect()  # start-up's own garbage goes first: frozen objects are never collected
    gc.freeze()
    if young_threshold > 0:
        _, older, oldest = gc.get_threshold()
        gc.set_threshold(young_threshold, older, oldest)


def arrow_allocator() -> None:
    """Make jemalloc Arrow's default allocator (the system's in a pyarrow built
    without it), unless ``ARROW_DEFAULT_MEMORY_POOL`` named one."""
    if os.environ.get("ARROW_DEFAULT_MEMORY_POOL"):
        return
    try:
        pa.set_memory_pool(pa.jemalloc_memory_pool())
    except NotImplementedError:  # pyarrow's ArrowNotImplementedError
        pa.set_memory_pool(pa.system_memory_pool())
        return
    pa.jemalloc_set_decay_ms(JEMALLOC_DECAY_MS)
