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

It also has its threads trade the interpreter lock every millisecond instead of
every 5 (``SWITCH_INTERVAL_S``): a delivery crosses four threads (the gRPC
door's event loop, the topic's committer, the subscription's dispatcher, the
loop again), and each could wait up to the interval for the lock while another
computes. With the Go client at 200 msgs/s (2,000 messages, two runs each) the
publish-to-callback p99 went from 27-31 to 20-24 ms; a StreamingPull drain
spent no more CPU per message.
"""

from __future__ import annotations

import gc
import sys

SWITCH_INTERVAL_S = 0.001


def settle(young_threshold: int) -> None:
    """Freeze the start-up heap, set the young generation's threshold (0 leaves
    CPython's) and the interpreter lock's switch interval."""
    gc.collect()  # start-up's own garbage goes first: frozen objects are never collected
    gc.freeze()
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    if young_threshold > 0:
        _, older, oldest = gc.get_threshold()
        gc.set_threshold(young_threshold, older, oldest)
