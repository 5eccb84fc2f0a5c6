"""The garbage collector of a server process.

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
"""

from __future__ import annotations

import gc


def settle(young_threshold: int) -> None:
    """Freeze the start-up heap and set the young generation's threshold
    (0 leaves CPython's)."""
    gc.collect()  # start-up's own garbage goes first: frozen objects are never collected
    gc.freeze()
    if young_threshold > 0:
        _, older, oldest = gc.get_threshold()
        gc.set_threshold(young_threshold, older, oldest)
