"""Hold StreamingPull streams open with Google's Python client, unmodified.

    python -m bench.s3.streams HOST SUBSCRIPTION...

One ``subscribe()`` per subscription; received messages are acked. Runs until
terminated (the idle case's "streams open" load, in its own process).
"""

from __future__ import annotations

import os
import signal
import sys
import threading

from google.cloud import pubsub_v1


def main() -> None:
    host, *subscriptions = sys.argv[1:]
    os.environ["PUBSUB_EMULATOR_HOST"] = host

    subscriber = pubsub_v1.SubscriberClient()
    futures = [subscriber.subscribe(s, lambda m: m.ack()) for s in subscriptions]
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    print("open", len(futures), flush=True)
    stop.wait()
    for future in futures:
        future.cancel()


if __name__ == "__main__":
    main()
