"""Filter-parser fuzz (against an independent reference evaluator) and body fuzz."""

from __future__ import annotations

import base64
import json
import random
import re
import socket
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

import httpx
import pyarrow as pa

from lakepubsub import errors
from lakepubsub._lake import table_schemas
from lakepubsub.resources.filters import parse_filter, parse_label_query
from tests.chaos.workload import PROJECT

KEYS = ["a", "b", "k-1", "x_y", "iana.org/lang", "é", "a b", "AND", 'q"t']
VALUES = ["", "v", "vv", "v w", "é", 'q"', "\\", "\n", "AND"]
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
# A body well over the server's 20 MB request limit.
OVERSIZED_BYTES = 21 * 1024 * 1024


@dataclass
class Outcome:
    counts: Counter[str] = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)

    def summary(self) -> str:
        return " ".join(f"{k}={v}" for k, v in sorted(self.counts.items()))


# -- filters --------------------------------------------------------------------------------

Tree = tuple[Any, ...]


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _key(key: str) -> str:
    return key if _BARE_KEY.fullmatch(key) and key not in ("AND", "OR", "NOT") else _quote(key)


def render(tree: Tree) -> str:
    op = tree[0]
    if op == "has":
        return f"attributes:{_key(tree[1])}"
    if op in ("=", "!="):
        return f"attributes.{_key(tree[1])} {op} {_quote(tree[2])}"
    if op == "prefix":
        return f"hasPrefix(attributes.{_key(tree[1])}, {_quote(tree[2])})"
    if op == "not":
        return f"NOT {render(tree[1])}" if tree[2] else f"-{render(tree[1])}"
    return "(" + f" {op} ".join(render(t) for t in tree[1:]) + ")"


def reference(tree: Tree, attrs: Mapping[str, str]) -> bool:
    """The documented semantics, written independently of the service's evaluator."""
    op = tree[0]
    if op == "has":
        return tree[1] in attrs
    if op == "=":
        return bool(attrs.get(tree[1]) == tree[2])
    if op == "!=":
        return bool(attrs.get(tree[1]) != tree[2])
    if op == "prefix":
        return tree[1] in attrs and attrs[tree[1]].startswith(tree[2])
    if op == "not":
        return not reference(tree[1], attrs)
    results = [reference(t, attrs) for t in tree[1:]]
    return all(results) if op == "AND" else any(results)


def random_tree(rng: random.Random, depth: int = 0) -> Tree:
    roll = rng.random()
    if depth >= 4 or roll < 0.45:
        kind = rng.choice(["has", "=", "!=", "prefix"])
        key = rng.choice(KEYS)
        return (kind, key) if kind == "has" else (kind, key, rng.choice(VALUES))
    if roll < 0.6:
        return ("not", random_tree(rng, depth + 1), rng.random() < 0.5)
    op = rng.choice(["AND", "OR"])
    return (op, *(random_tree(rng, depth + 1) for _ in range(rng.randint(2, 3))))


def _mutate(text: str, rng: random.Random) -> str:
    pieces = ["(", ")", '"', "\\", " AND ", " OR ", "NOT ", "-", ":", ".", "=", "!=", ",", "\x00"]
    for _ in range(rng.randint(1, 3)):
        at = rng.randint(0, len(text))
        if rng.random() < 0.5 and text:
            text = text[:at] + text[at + 1 :]
        else:
            text = text[:at] + rng.choice([*pieces, chr(rng.randint(1, 0x2FFF))]) + text[at:]
    return text


def filter_fuzz(*, examples: int, seed: int = 11) -> Outcome:
    """Parse generated and mutated filters: valid ones must evaluate as the reference does
    (row by row and as an Arrow mask), print to text that parses back to the same filter;
    everything else must be rejected with InvalidArgument."""

    out = Outcome()
    rng = random.Random(seed)
    maps = [{k: rng.choice(VALUES) for k in rng.sample(KEYS, rng.randint(0, 4))} for _ in range(40)]
    column = pa.array([list(m.items()) or None for m in maps], table_schemas.ATTRIBUTES)
    for _ in range(examples):
        tree = random_tree(rng)
        text = render(tree)
        try:
            parsed = parse_filter(text)
            again = parse_filter(str(parsed))
        except Exception as exc:
            out.failures.append(f"valid filter {text!r} raised {exc!r}"[:300])
            continue
        out.counts["valid"] += 1
        expected = [reference(tree, m) for m in maps]
        if [parsed.matches(m) for m in maps] != expected:
            out.failures.append(f"{text!r}: matches() disagrees with the reference")
        if parsed.mask(column).to_pylist() != expected:
            out.failures.append(f"{text!r}: mask() disagrees with the reference")
        if again != parsed:
            out.failures.append(f"{text!r}: canonical text {str(parsed)!r} parses differently")
        for parse in (parse_filter, parse_label_query):
            junk = _mutate(text, rng)
            try:
                parse(junk)
                out.counts["mutant-accepted"] += 1
            except errors.InvalidArgument:
                out.counts["mutant-rejected"] += 1
            except Exception as exc:
                out.failures.append(f"{parse.__name__}({junk!r}) raised {exc!r}"[:300])
    return out


def filters_via_api(url: str, *, count: int, seed: int = 12) -> Outcome:
    """Create subscriptions with generated (and broken) filters, then publish and pull."""
    out = Outcome()
    rng = random.Random(seed)
    base = f"{url}/v1/projects/{PROJECT}"
    with httpx.Client(base_url=base, timeout=60) as client:
        client.put("/topics/filter-topic", json={})
        for i in range(count):
            text = render(random_tree(rng))
            text = _mutate(text, rng) if i % 3 == 2 else text
            sub = f"/subscriptions/filter-sub-{i}"
            body = {"topic": f"projects/{PROJECT}/topics/filter-topic", "filter": text}
            calls = [("create", client.put(sub, json=body))]
            if calls[0][1].status_code == 200:
                attrs = {k: rng.choice(VALUES) for k in rng.sample(KEYS, 2)}
                message = {"data": "eA==", "attributes": attrs}
                publish = {"messages": [message]}
                calls.append(("publish", client.post("/topics/filter-topic:publish", json=publish)))
                pull = {"maxMessages": 5, "returnImmediately": True}
                calls.append(("pull", client.post(f"{sub}:pull", json=pull)))
                calls.append(("delete", client.delete(sub)))
            for name, response in calls:
                out.counts[f"{name}:{response.status_code}"] += 1
                if response.status_code >= 500:
                    out.failures.append(f"{name} with filter {text!r}: {response.text[:200]}")
    return out


# -- bodies ---------------------------------------------------------------------------------


def _nested(depth: int) -> bytes:
    return b'{"a":' * depth + b"1" + b"}" * depth


FIXED_BODIES: list[bytes] = [
    b"", b"{", b"}", b"[", b"null", b"true", b"0", b"-1", b'"text"', b"[]", b"{}",
    b"\xff\xfe\x00{", "\ufeff{}".encode(), b"[" * 100_000 + b"]" * 100_000, _nested(100_000),
    b'{"maxMessages": 1' + b"0" * 5000 + b"}", b'{"maxMessages": NaN}', b"1e999",
    b'{"a": 1, "a": 2}', b'{"ackIds": ["' + b"a" * 100_000 + b'"]}',
]  # fmt: skip

FIELD_VALUES: dict[str, list[Any]] = {
    "messages": [
        {}, "x", 1, [1], [{}], [None], [[]], [{"data": 1}], [{"data": "!!!"}],
        [{"attributes": []}], [{"attributes": {"k": 1}}], [{"attributes": {"": "v"}}],
        [{"attributes": {"goog": "v"}}], [{"orderingKey": 5}], [{"data": "eA=="}] * 1001,
        [{"data": "eA==", "attributes": {f"k{i}": "v" for i in range(101)}}],
        [{"data": "eA==", "attributes": {"k" * 300: "v"}}],
    ],
    "maxMessages": [-1, 0, 10**10, "5", True, None, 2**63, 2**64, 1.5, [], {}],
    "returnImmediately": ["yes", 2, None, []],
    "ackIds": ["x", [1], [""], [None], ["x" * 300], [], ["00000000-m1-1"] * 10_000, {}],
    "ackDeadlineSeconds": [-1, 601, 2**40, 1.5, "10", None, 10**30],
    "updateMask": [5, "", "nonexistent", "labels,,x", None],
    "topic": [5, "", "projects/x", "projects/chaos/topics/missing", {}, None],
    "subscription": [5, None, {"topic": 5}, {"ackDeadlineSeconds": 10**300}],
    "pushConfig": [5, {"pushEndpoint": "ftp://x"}, {"pushEndpoint": 5}, {"attributes": []}],
    "filter": [5, "attributes:", "(" * 200, "attributes.a = " + '"' * 300],
    "retryPolicy": [{"minimumBackoff": "-5s"}, {"maximumBackoff": "x"}, []],
    "deadLetterPolicy": [{"deadLetterTopic": "x"}, {"maxDeliveryAttempts": -1}, 5],
    "messageRetentionDuration": ["99999999999999999999s", "-1s", "1.0000000001s", 5],
    "expirationPolicy": [{"ttl": "1e9s"}, {"ttl": 5}, "x"],
    "truncationPolicy": [{"maxBytes": -1}, {"maxAgeSeconds": 2**70}, {"maxBytes": "x"}],
    "labels": [{"A": "b"}, {"": ""}, [], {"k": 5}],
    "enableExactlyOnceDelivery": ["x", 5],
    "name": [5, "projects/other/topics/x"],
}  # fmt: skip

BASE_BODIES: dict[str, dict[str, Any]] = {
    "publish": {"messages": [{"data": "eA=="}]},
    "pull": {"maxMessages": 1, "returnImmediately": True},
    "acknowledge": {"ackIds": ["00000000-m1-1"]},
    "modifyAckDeadline": {"ackIds": ["00000000-m1-1"], "ackDeadlineSeconds": 10},
    "topic": {"labels": {"a": "b"}},
    "subscription": {"topic": f"projects/{PROJECT}/topics/fuzz-topic"},
}


def _routes(url: str, pinned: Mapping[str, str]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    doc = httpx.get(f"{url}/openapi.json", timeout=30).json()
    for template, methods in doc["paths"].items():
        path = re.sub(r"\{(\w+)\}", lambda m: pinned.get(m[1], f"fuzz-{m[1]}"), template)
        for method in methods:
            if method.upper() not in ("POST", "PUT", "PATCH"):
                continue
            key = next((k for k in BASE_BODIES if path.endswith(":" + k)), None)
            if key is None:
                key = "subscription" if "/subscriptions/" in path else "topic"
                if method.upper() == "PATCH":
                    inner = BASE_BODIES[key]
                    yield method.upper(), path, {key: inner, "updateMask": "labels"}
                    continue
            yield method.upper(), path, BASE_BODIES[key]


def body_fuzz(url: str, pinned: Mapping[str, str], *, seed: int, rounds: int) -> Outcome:
    """Malformed, mistyped and oversized bodies to every route that takes one: no 5xx."""
    out = Outcome()
    rng = random.Random(seed)
    with httpx.Client(base_url=url, timeout=120) as client:
        for method, path, base in _routes(url, pinned):
            bodies = list(FIXED_BODIES)
            for _ in range(rounds):
                for name, values in FIELD_VALUES.items():
                    bodies.append(json.dumps({**base, name: rng.choice(values)}).encode())
                bodies.append(bytes(rng.randrange(256) for _ in range(rng.randint(1, 200))))
            for body in bodies:
                headers = {"content-type": rng.choice(["application/json", "text/plain", ""])}
                _send(client, out, method, path, body, headers)
        publish = f"/v1/projects/{pinned['project']}/topics/{pinned['topic']}:publish"
        big = {"messages": [{"data": base64.b64encode(b"x" * 1_000_000).decode()}] * 11}
        _send(client, out, "POST", publish, json.dumps(big).encode(), {}, expect=400)
        _send(client, out, "POST", publish, b" " * OVERSIZED_BYTES, {}, expect=413)
        chunks = (b" " * 1024 * 1024 for _ in range(OVERSIZED_BYTES // (1024 * 1024)))
        _send(client, out, "POST", publish, chunks, {}, expect=413)
    _half_sent_body(url, pinned)
    return out


def _send(
    client: httpx.Client,
    out: Outcome,
    method: str,
    path: str,
    body: bytes | Iterator[bytes],
    headers: dict[str, str],
    expect: int | None = None,
) -> None:
    label = path.rsplit("/", 1)[-1]
    try:
        response = client.request(method, path, content=body, headers=headers)
    except httpx.HTTPError as exc:
        out.failures.append(f"{method} {label}: {type(exc).__name__}")
        return
    out.counts[str(response.status_code)] += 1
    if response.status_code >= 500 or (expect is not None and response.status_code != expect):
        shown = body[:80] if isinstance(body, bytes) else b"<stream>"
        out.failures.append(
            f"{method} {label} {shown!r}: {response.status_code} {response.text[:160]}"
        )


def _half_sent_body(url: str, pinned: Mapping[str, str]) -> None:
    """A client that announces a body and hangs up halfway (the server must shrug it off)."""
    parsed = urlparse(url)
    path = f"/v1/projects/{pinned['project']}/topics/{pinned['topic']}:publish"
    with socket.create_connection((parsed.hostname or "127.0.0.1", parsed.port or 80)) as sock:
        sock.sendall(
            f"POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            'content-length: 1000\r\n\r\n{"messages": ['.encode()
        )
