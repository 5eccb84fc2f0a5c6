"""Publishers and consumers that drive the API over HTTP and record what they saw."""

from __future__ import annotations

import base64
import itertools
import random
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from tests.chaos.ledger import Delivery, LeaseChange, Ledger

PROJECT = "chaos"
# A request that takes longer than this counts as a hang.
REQUEST_TIMEOUT_S = 90.0
# Longest ack deadline extension a consumer asks for (an extended lease whose ack is
# lost in a crash holds its message back this long: the drain waits it out).
MAX_EXTEND_S = 15
# Pause after a connection error (the server is down or restarting).
RECONNECT_PAUSE_S = 0.05


@dataclass(frozen=True)
class Behaviour:
    """What a consumer does with each message it receives (probabilities, rest: ack)."""

    nack: float = 0.05
    forget: float = 0.03  # never answer: the lease expires and the message comes back
    extend: float = 0.05  # modifyAckDeadline to a random deadline, then ack
    short_deadline: float = 0.0  # modifyAckDeadline to 1-2 s, wait it out, ack late (stale)
    max_messages: int = 50


ACK_ALL = Behaviour(nack=0, forget=0, extend=0, short_deadline=0, max_messages=500)


class Api:
    """One client's view of the API: round-robin over the servers, outcomes to the ledger."""

    def __init__(self, urls: Sequence[str], ledger: Ledger, *, seed: int) -> None:
        self._clients = [httpx.Client(base_url=u, timeout=REQUEST_TIMEOUT_S) for u in urls]
        self._ledger = ledger
        self.rng = random.Random(seed)

    def close(self) -> None:
        for client in self._clients:
            client.close()

    def call(
        self, operation: str, method: str, path: str, body: Any = None
    ) -> httpx.Response | None:
        client = self.rng.choice(self._clients)
        try:
            response = client.request(method, f"/v1/projects/{PROJECT}/{path}", json=body)
        except httpx.TimeoutException:
            self._ledger.status(operation, "timeout")
            return None
        except httpx.TransportError:
            self._ledger.status(operation, "connection")
            time.sleep(RECONNECT_PAUSE_S)
            return None
        self._ledger.status(operation, response.status_code)
        return response


def create_resources(api: Api, topic: str, subscriptions: dict[str, tuple[int, bool]]) -> None:
    """Create the topic and its subscriptions (name -> (ack deadline, exactly once))."""
    response = api.call("admin", "PUT", f"topics/{topic}", {})
    if response is None or response.status_code != 200:
        raise RuntimeError(f"could not create the topic: {response and response.text}")
    for name, (deadline, exactly_once) in subscriptions.items():
        body = {
            "topic": f"projects/{PROJECT}/topics/{topic}",
            "ackDeadlineSeconds": deadline,
            "enableExactlyOnceDelivery": exactly_once,
        }
        response = api.call("admin", "PUT", f"subscriptions/{name}", body)
        if response is None or response.status_code != 200:
            raise RuntimeError(f"could not create {name}: {response and response.text}")


def publisher(api: Api, ledger: Ledger, topic: str, stop: threading.Event, tag: str) -> None:
    """Publish batches of unique payloads until ``stop``."""
    for n in itertools.count():
        if stop.is_set():
            return
        payloads = [f"{tag}-{n}-{i}" for i in range(api.rng.randint(1, 20))]
        body = {"messages": [{"data": base64.b64encode(p.encode()).decode()} for p in payloads]}
        response = api.call("publish", "POST", f"topics/{topic}:publish", body)
        if response is not None and response.status_code == 200:
            ledger.publish_ok(response.json()["messageIds"], payloads)
        else:
            ledger.publish_unknown(len(payloads))


def consumer(
    api: Api, ledger: Ledger, sub: str, stop: threading.Event, behaviour: Behaviour
) -> None:
    """Pull and handle messages per ``behaviour`` until ``stop``."""
    while not stop.is_set():
        consume_once(api, ledger, sub, behaviour)


def consume_once(api: Api, ledger: Ledger, sub: str, behaviour: Behaviour) -> int:
    """One pull and the handling of what it returned; the number of messages received."""
    sent = time.time()
    body = {"maxMessages": api.rng.randint(1, behaviour.max_messages)}
    response = api.call("pull", "POST", f"subscriptions/{sub}:pull", body)
    if response is None or response.status_code != 200:
        return 0
    received = time.time()
    items = [
        (r["message"]["messageId"], r["ackId"], r.get("deliveryAttempt", 0))
        for r in response.json().get("receivedMessages", [])
    ]
    ledger.delivered(sub, [Delivery(m, a, n, sent, received) for m, a, n in items])
    to_ack, late = [], []
    for message_id, ack_id, _ in items:
        roll = api.rng.random()
        if roll < behaviour.nack:
            change(api, ledger, sub, [(message_id, ack_id)], 0)
        elif (roll := roll - behaviour.nack) < behaviour.forget:
            pass
        elif (roll := roll - behaviour.forget) < behaviour.extend:
            change(api, ledger, sub, [(message_id, ack_id)], api.rng.randint(1, MAX_EXTEND_S))
            to_ack.append((message_id, ack_id))
        elif roll - behaviour.extend < behaviour.short_deadline:
            change(api, ledger, sub, [(message_id, ack_id)], 1)
            late.append((message_id, ack_id))
        else:
            to_ack.append((message_id, ack_id))
    if to_ack:
        acknowledge(api, ledger, sub, to_ack)
    if late:
        time.sleep(api.rng.uniform(1.0, 2.5))
        acknowledge(api, ledger, sub, late)
    return len(items)


def change(api: Api, ledger: Ledger, sub: str, items: list[tuple[str, str]], deadline: int) -> None:
    sent = time.time()
    for message_id, ack_id in items:
        ledger.changed(sub, message_id, LeaseChange(ack_id, deadline, sent))
    body = {"ackIds": [a for _, a in items], "ackDeadlineSeconds": deadline}
    api.call("modack", "POST", f"subscriptions/{sub}:modifyAckDeadline", body)


def acknowledge(api: Api, ledger: Ledger, sub: str, items: list[tuple[str, str]]) -> None:
    """Ack; successful ids are those of a 200, or a 400 that does not list them as failed."""
    response = api.call(
        "ack", "POST", f"subscriptions/{sub}:acknowledge", {"ackIds": [a for _, a in items]}
    )
    if response is None:
        return
    failed = ack_failures(response)
    if failed is None:
        return
    done = [m for m, a in items if a not in failed]
    ledger.acked(sub, done, len(items) - len(done), time.time())


def ack_failures(response: httpx.Response) -> set[str] | None:
    """The ack ids an acknowledge response refused; None if its outcome is unknown."""
    if response.status_code == 200:
        return set()
    if response.status_code != 400:
        return None
    try:
        details = response.json()["error"].get("details", [])
    except (ValueError, KeyError):
        return None
    for detail in details:
        if detail.get("reason") == "EXACTLY_ONCE_ACKID_FAILURE":
            return set(detail.get("metadata", {}))
    return None


def run_threads(targets: list[Callable[[], None]]) -> list[threading.Thread]:
    threads = [threading.Thread(target=t, daemon=True) for t in targets]
    for thread in threads:
        thread.start()
    return threads


def drain(
    urls: Sequence[str],
    ledger: Ledger,
    subs: Sequence[str],
    done: Callable[[str], bool],
    timeout_s: float,
) -> dict[str, bool]:
    """Pull and ack everything left (expired leases come back) until ``done(sub)``."""
    api = Api(urls, ledger, seed=0)
    deadline = time.monotonic() + timeout_s
    finished = dict.fromkeys(subs, False)
    try:
        while time.monotonic() < deadline and not all(finished.values()):
            for sub in subs:
                if not finished[sub] and consume_once(api, ledger, sub, ACK_ALL) == 0:
                    finished[sub] = done(sub)
    finally:
        api.close()
    return finished


def unique_tag() -> str:
    return uuid.uuid4().hex[:6]
