"""Bad input: schemathesis against the served OpenAPI document, then filter and body fuzz.

Schema-driven requests go to a real server on a local lake. Path parameters
are pinned to an existing project, topic and subscription in most cases, so
the generated bodies reach the engine instead of failing name validation.
Every response must be below 500; 200 responses must match the documented
schema (schemathesis ``response_schema_conformance``).
"""

from __future__ import annotations

import random
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import httpx
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.core.errors import InvalidSchema
from schemathesis.core.failures import FailureGroup
from schemathesis.core.result import Ok
from schemathesis.specs.openapi.checks import response_schema_conformance

from tests.chaos import fuzz_inputs
from tests.chaos.servers import ApiServer, local_lake
from tests.chaos.verify import Result
from tests.chaos.workload import PROJECT

PINNED = {"project": PROJECT, "topic": "fuzz-topic", "subscription": "fuzz-sub"}
# Share of generated cases whose path parameters are replaced by PINNED ones.
PINNED_SHARE = 0.7
EXAMPLES = 40  # per operation and generation mode
MIN_REQUESTS_FULL = 1_000


@dataclass
class SchemaFuzz:
    requests: int = 0
    statuses: Counter[int] = field(default_factory=Counter)
    server_errors: list[str] = field(default_factory=list)
    nonconforming: Counter[str] = field(default_factory=Counter)  # operation: failure title
    unsatisfiable: list[str] = field(default_factory=list)  # no such input can be generated
    invalid: list[str] = field(default_factory=list)  # operations the document gets wrong


def run(*, quick: bool) -> Result:
    result = Result("fuzz")
    with local_lake() as lake:
        server = ApiServer(lake)
        server.start()
        try:
            ensure_resources(server.url)
            started = time.monotonic()
            if quick:
                result.notes.append("schemathesis: not in --quick (CI runs tests/api/test_fuzz.py)")
            else:
                found = schema_fuzz(server.url, EXAMPLES, seed=4)
                _report_schema(result, found)
                result.notes.append(f"schemathesis took {time.monotonic() - started:.0f} s")
            started = time.monotonic()
            filters = fuzz_inputs.filter_fuzz(examples=300 if quick else 3_000)
            result.check("filter-parser", not filters.failures, failures=filters.failures[:20])
            result.notes.append(f"filter parser: {filters.summary()}")
            via_api = fuzz_inputs.filters_via_api(server.url, count=15 if quick else 60)
            result.check("filter-via-api-no-5xx", not via_api.failures, failures=via_api.failures)
            result.notes.append(f"filters via the API: {via_api.summary()}")
            bodies = fuzz_inputs.body_fuzz(server.url, PINNED, seed=5, rounds=1 if quick else 4)
            result.check("bodies-no-5xx", not bodies.failures, failures=bodies.failures[:50])
            result.notes.append(f"malformed and oversized bodies: {bodies.summary()}")
            result.notes.append(f"filter and body fuzz took {time.monotonic() - started:.0f} s")
            alive = httpx.get(f"{server.url}/healthz", timeout=10).status_code == 200
            result.check("server-alive", alive and server.process is not None)
        finally:
            server.stop()
    return result


def _report_schema(result: Result, found: SchemaFuzz) -> None:
    enough = found.requests >= MIN_REQUESTS_FULL
    statuses = " ".join(f"{s}={n}" for s, n in sorted(found.statuses.items()))
    result.check("schema-requests", enough, f"{found.requests} requests")
    result.check("schema-no-5xx", not found.server_errors, failures=found.server_errors)
    result.check("schema-valid", not found.invalid, failures=found.invalid)
    detail = "; ".join(f"{k} (x{n})" for k, n in sorted(found.nonconforming.items()))
    result.check("schema-response-conformance", not found.nonconforming, detail)
    result.notes.append(f"schemathesis: {found.requests} requests, statuses {statuses}")
    if found.unsatisfiable:
        result.notes.append(f"no negative cases possible: {len(found.unsatisfiable)} operations")
    result.counts = {"requests": found.requests, "server_errors": len(found.server_errors)}


def ensure_resources(url: str) -> None:
    """The pinned topic and subscription, (re)created if a fuzzed DELETE removed them."""
    base = f"{url}/v1/projects/{PINNED['project']}"
    httpx.put(f"{base}/topics/{PINNED['topic']}", json={}, timeout=60)
    body = {"topic": f"projects/{PINNED['project']}/topics/{PINNED['topic']}"}
    httpx.put(f"{base}/subscriptions/{PINNED['subscription']}", json=body, timeout=60)


def schema_fuzz(url: str, examples: int, *, seed: int) -> SchemaFuzz:
    """Generate requests for every operation in the served document, positive and negative."""

    found = SchemaFuzz()
    rng = random.Random(seed)
    schema = schemathesis.openapi.from_url(f"{url}/openapi.json")
    operations = []
    for item in schema.get_all_operations():
        if isinstance(item, Ok):
            operations.append(item.ok())
        else:
            found.invalid.append(f"{item.err().label}: {item.err()}"[:300])
    for operation in operations:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):

            @settings(
                max_examples=examples,
                deadline=None,
                database=None,
                derandomize=True,
                phases=[Phase.explicit, Phase.generate],
                suppress_health_check=list(HealthCheck),
            )
            @given(case=operation.as_strategy(generation_mode=mode))
            def one(case: Any) -> None:
                _exercise(case, url, rng, found, response_schema_conformance)

            try:
                one()
            except Unsatisfiable:  # no invalid input exists (an operation without inputs)
                found.unsatisfiable.append(f"{operation.label} {mode}")
            except InvalidSchema as exc:  # the document is wrong about this operation
                found.invalid.append(f"{operation.label}: {exc}"[:300])
                break
    return found


def _exercise(case: Any, url: str, rng: random.Random, found: SchemaFuzz, conformance: Any) -> None:

    if rng.random() < PINNED_SHARE:
        for name in case.path_parameters:
            if name in PINNED:
                case.path_parameters[name] = PINNED[name]
    try:
        response = case.call(base_url=url, timeout=60)
    except Exception as exc:  # a dropped connection is as bad as a 5xx
        found.server_errors.append(f"{case.operation.label}: {type(exc).__name__}")
        return
    found.requests += 1
    found.statuses[response.status_code] += 1
    if response.status_code >= 500:
        found.server_errors.append(
            f"{case.operation.label} -> {response.status_code} {response.text[:200]} "
            f"[{case.as_curl_command()}]"[:600]
        )
    try:
        case.validate_response(response, checks=[conformance])
    except FailureGroup as group:
        for failure in group.exceptions:
            found.nonconforming[f"{case.operation.label}: {failure.title}"] += 1
    if case.method.upper() == "DELETE" and response.status_code == 200:
        ensure_resources(url)


def _count(statuses: dict[str, int]) -> str:
    return " ".join(f"{k}={v}" for k, v in sorted(statuses.items()))
