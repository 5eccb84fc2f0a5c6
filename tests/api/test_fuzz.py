"""Schema-driven fuzzing (schemathesis) of the served OpenAPI document, against a real server.

Every generated request must get a non-5xx answer whose body, for documented
status codes, matches the document. Most cases have their path parameters
pinned to an existing project, topic and subscription so that the bodies reach
the engine instead of failing name validation. ``LAKEPUBSUB_FUZZ_EXAMPLES``
sets the examples per operation (``make chaos`` runs the 1,000+ request form
through ``python -m tests.chaos --scenario fuzz``).
"""

from __future__ import annotations

import os
import random
import re
import warnings
from collections import Counter
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import response_schema_conformance
from support import LakeSpec, Server, start_server, stop_server

from api.app import create_app

EXAMPLES = int(os.environ.get("LAKEPUBSUB_FUZZ_EXAMPLES", "10"))
PINNED = {"project": "fuzz", "topic": "fuzz-topic", "subscription": "fuzz-sub"}
PINNED_SHARE = 0.7
# This share of the generated JSON bodies also carries a field no Pub/Sub message has.
UNKNOWN_FIELD_SHARE = 0.3
UNKNOWN_FIELD = "lakepubsubFuzzUnknownField"
_pin = random.Random(20)
_sent = {"requests": 0, "unknown": 0}


def _ensure_resources(url: str) -> None:
    base = f"{url}/v1/projects/{PINNED['project']}"
    httpx.put(f"{base}/topics/{PINNED['topic']}", json={}, timeout=60)
    body = {"topic": f"projects/{PINNED['project']}/topics/{PINNED['topic']}"}
    httpx.put(f"{base}/subscriptions/{PINNED['subscription']}", json=body, timeout=60)


@pytest.fixture(scope="module")
def fuzz_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    server = start_server(LakeSpec(str(tmp_path_factory.mktemp("fuzz-lake")), {}))
    try:
        _ensure_resources(server.url)
        yield server
    finally:
        stop_server(server)


def _document() -> dict[str, Any]:
    """The OpenAPI document the server serves, built in-process at collection time.

    ``schemathesis.pytest.from_fixture`` (loading from the running server) fails
    on pytest 9 (it sets ``Function._nodeid``); test_served_document_is_the_one_fuzzed
    checks that the server serves this very document.
    """

    with warnings.catch_warnings():
        # FastAPI warns about duplicate operation ids (test_operation_ids_are_unique)
        warnings.simplefilter("ignore", UserWarning)
        return create_app().openapi()


def _undeclared_path_parameters(doc: dict[str, Any]) -> dict[str, list[str]]:
    """Path templates whose ``{name}`` parts some operation does not declare."""
    found: dict[str, list[str]] = {}
    for path, operations in doc["paths"].items():
        names = set(re.findall(r"\{(\w+)\}", path))
        for method, operation in operations.items():
            declared = {p["name"] for p in operation.get("parameters", []) if p["in"] == "path"}
            if names - declared:
                found.setdefault(path, []).append(method.upper())
    return found


DOCUMENT = _document()
schema = schemathesis.openapi.from_dict(DOCUMENT)


@schema.parametrize()
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
)
def test_no_server_errors_and_conforming_responses(case: Any, fuzz_server: Server) -> None:
    if _pin.random() < PINNED_SHARE:
        for name in case.path_parameters:
            if name in PINNED:
                case.path_parameters[name] = PINNED[name]
    unknown = isinstance(case.body, dict) and _pin.random() < UNKNOWN_FIELD_SHARE
    if unknown:  # a field Pub/Sub does not have: refused, naming it
        case.body = {**case.body, UNKNOWN_FIELD: 1}
        _sent["unknown"] += 1
    _sent["requests"] += 1
    response = case.call_and_validate(
        base_url=fuzz_server.url,
        checks=[not_a_server_error, response_schema_conformance],
        timeout=60,
    )
    if unknown and response.status_code not in (401, 403, 404, 405, 413, 415):
        # INVALID_ARGUMENT: for the unknown field (named first, or a field schemathesis
        # made up), or for a bad resource name checked before the body.
        assert response.status_code == 400, response.text
        assert response.json()["error"]["status"] == "INVALID_ARGUMENT"
    if case.method.upper() == "DELETE" and response.status_code == 200:
        _ensure_resources(fuzz_server.url)


def test_served_document_is_the_one_fuzzed(fuzz_server: Server) -> None:
    served = httpx.get(f"{fuzz_server.url}/openapi.json", timeout=30).json()
    assert served == DOCUMENT


def test_operation_ids_are_unique() -> None:
    ids = Counter(
        operation["operationId"]
        for path in DOCUMENT["paths"].values()
        for operation in path.values()
        if isinstance(operation, dict) and "operationId" in operation
    )
    assert [i for i, n in ids.items() if n > 1] == []


def test_path_parameters_are_declared() -> None:
    assert _undeclared_path_parameters(DOCUMENT) == {}


def test_fuzz_sent_requests() -> None:
    """Runs after the schema tests (file order): they sent requests to every operation."""
    if _sent["requests"] == 0:
        pytest.skip("the schema tests did not run in this session")
    print(
        f"schemathesis sent {_sent['requests']} requests, {_sent['unknown']} with an unknown field"
    )
    assert _sent["requests"] >= EXAMPLES
    assert _sent["unknown"] > 0


def test_publish_non_ascii_data_is_rejected(fuzz_server: Server) -> None:
    base = f"{fuzz_server.url}/v1/projects/{PINNED['project']}"
    body = {"messages": [{"data": "é"}]}
    response = httpx.post(f"{base}/topics/{PINNED['topic']}:publish", json=body, timeout=60)
    assert response.status_code == 400, response.text
