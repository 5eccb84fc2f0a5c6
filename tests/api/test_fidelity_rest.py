"""Where the REST door must answer as Google does (issue 15): unknown fields, fields of
features that are not built, methods that are not built, Google's attribute rules
and when ``deliveryAttempt`` is set. Against a real server on a real lake."""

from __future__ import annotations

import base64
import json
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import googleapiclient
import httpx
import pytest
from support import LakeSpec, Server, start_server, stop_server

UNBUILT_TOPIC_FIELDS = {
    "kmsKeyName": "projects/p/locations/l/keyRings/r/cryptoKeys/k",
    "messageStoragePolicy": {"allowedPersistenceRegions": ["europe-west1"]},
    "ingestionDataSourceSettings": {"awsKinesis": {"streamArn": "arn:aws:kinesis:x"}},
    "messageTransforms": [{"javascriptUdf": {"functionName": "f", "code": "x"}}],
}
UNBUILT_SUBSCRIPTION_FIELDS = {
    "bigqueryConfig": {"table": "project.dataset.table"},
    "cloudStorageConfig": {"bucket": "b"},
    "messageTransforms": [{"javascriptUdf": {"functionName": "f", "code": "x"}}],
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = start_server(LakeSpec(str(tmp_path_factory.mktemp("fidelity-lake")), {}))
    yield srv
    stop_server(srv)


@pytest.fixture
def http(server: Server) -> Iterator[httpx.Client]:
    with server.client() as client:
        yield client


@pytest.fixture
def base() -> str:
    return f"/v1/projects/p{uuid.uuid4().hex[:8]}"


def error(response: httpx.Response) -> dict[str, Any]:
    doc: dict[str, Any] = response.json()["error"]
    return doc


def make_topic(http: httpx.Client, base: str, name: str = "top") -> str:
    assert http.put(f"{base}/topics/{name}", json={}).status_code == 200
    return f"{base[4:]}/topics/{name}"


# -- unknown fields -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("PUT", "/topics/top2", {"noSuchField": 1}),
        ("PUT", "/subscriptions/sub2", {"topic": "TOPIC", "noSuchField": 1}),
        (
            "PATCH",
            "/topics/top",
            {"topic": {"labels": {}}, "updateMask": "labels", "noSuchField": 1},
        ),
        ("POST", "/topics/top:publish", {"messages": [{"data": "eA=="}], "noSuchField": 1}),
        ("POST", "/subscriptions/sub:pull", {"maxMessages": 1, "noSuchField": 1}),
        ("POST", "/subscriptions/sub:acknowledge", {"ackIds": [], "noSuchField": 1}),
        ("POST", "/subscriptions/sub:seek", {"time": "2026-01-01T00:00:00Z", "noSuchField": 1}),
        ("PUT", "/snapshots/snap", {"subscription": "SUB", "noSuchField": 1}),
    ],
)
def test_an_unknown_field_is_named_and_changes_nothing(
    http: httpx.Client, base: str, method: str, path: str, body: dict[str, Any]
) -> None:
    topic = make_topic(http, base)
    sub = f"{base[4:]}/subscriptions/sub"
    assert http.put(f"{base}/subscriptions/sub", json={"topic": topic}).status_code == 200
    text = json.dumps(body).replace("TOPIC", topic).replace("SUB", sub)
    response = http.request(
        method, base + path, content=text, headers={"content-type": "application/json"}
    )
    assert response.status_code == 400, response.text
    assert error(response)["status"] == "INVALID_ARGUMENT"
    assert error(response)["message"] == (
        'Invalid JSON payload received. Unknown name "noSuchField": Cannot find field.'
    )
    assert error(response)["details"][0]["@type"] == "type.googleapis.com/google.rpc.BadRequest"
    # nothing was created, published or changed
    assert http.get(f"{base}/topics/top2").status_code == 404
    assert http.get(f"{base}/subscriptions/sub2").status_code == 404
    assert http.get(f"{base}/snapshots/snap").status_code == 404
    pulled = http.post(
        f"{base}/subscriptions/sub:pull", json={"returnImmediately": True, "maxMessages": 5}
    )
    assert pulled.json() == {}


def test_unknown_fields_inside_objects_and_messages_are_named(
    http: httpx.Client, base: str
) -> None:
    topic = make_topic(http, base)
    body = {"topic": topic, "pushConfig": {"pushEndpoint": "http://127.0.0.1:9/x", "bogus": 1}}
    response = http.put(f"{base}/subscriptions/sub", json=body)
    assert response.status_code == 400
    assert error(response)["message"] == (
        "Invalid JSON payload received. Unknown name \"bogus\" at 'pushConfig': Cannot find field."
    )
    messages = [{"data": "eA=="}, {"data": "eA==", "ordering": "k"}]
    response = http.post(f"{base}/topics/top:publish", json={"messages": messages})
    assert response.status_code == 400
    assert error(response)["message"] == (
        "Invalid JSON payload received. Unknown name \"ordering\" at 'messages[1]': "
        "Cannot find field."
    )


def test_protobuf_names_and_output_only_fields_are_accepted(http: httpx.Client, base: str) -> None:
    """Google's parser takes protobuf's field names too, and ignores output-only fields;
    a client may send back what it got."""
    topic = make_topic(http, base)
    created = http.put(
        f"{base}/subscriptions/sub", json={"topic": topic, "ack_deadline_seconds": 30}
    )
    assert created.status_code == 200, created.text
    echoed = {**created.json(), "name": "", "topicMessageRetentionDuration": "604800s"}
    again = http.put(f"{base}/subscriptions/sub-copy", json=echoed)
    assert again.status_code == 200, again.text
    assert again.json()["ackDeadlineSeconds"] == 30
    message = {"data": "eA==", "ordering_key": "k", "messageId": "ignored"}
    assert http.post(f"{base}/topics/top:publish", json={"messages": [message]}).status_code == 200
    topic_doc = {**http.get(f"{base}/topics/top").json(), "state": "ACTIVE", "satisfiesPzs": False}
    assert http.put(f"{base}/topics/top3", json={**topic_doc, "name": ""}).status_code == 200


# -- fields of features that are not built --------------------------------------------------


@pytest.mark.parametrize(("field", "value"), list(UNBUILT_TOPIC_FIELDS.items()))
def test_unbuilt_topic_fields_are_refused_alike_on_create_and_update(
    http: httpx.Client, base: str, field: str, value: Any
) -> None:
    created = http.put(f"{base}/topics/top", json={field: value})
    assert created.status_code == 400
    assert error(created)["status"] == "INVALID_ARGUMENT"
    assert f"topic.{field}:" in error(created)["message"]
    assert "not built in lakepubsub" in error(created)["message"]
    assert http.get(f"{base}/topics/top").status_code == 404
    make_topic(http, base)
    mask = "".join(f"_{c.lower()}" if c.isupper() else c for c in field)
    updated = http.patch(f"{base}/topics/top", json={"topic": {field: value}, "updateMask": mask})
    assert updated.status_code == 400
    assert error(updated)["message"] == error(created)["message"]
    masked_only = http.patch(f"{base}/topics/top", json={"topic": {}, "updateMask": field})
    assert error(masked_only)["message"] == error(created)["message"]
    assert field not in http.get(f"{base}/topics/top").json()


@pytest.mark.parametrize(("field", "value"), list(UNBUILT_SUBSCRIPTION_FIELDS.items()))
def test_unbuilt_subscription_fields_are_refused_alike_on_create_and_update(
    http: httpx.Client, base: str, field: str, value: Any
) -> None:
    """A "BigQuery subscription" must not quietly become a pull subscription."""
    topic = make_topic(http, base)
    created = http.put(f"{base}/subscriptions/sub", json={"topic": topic, field: value})
    assert created.status_code == 400
    assert f"subscription.{field}:" in error(created)["message"]
    assert "not built in lakepubsub" in error(created)["message"]
    assert http.get(f"{base}/subscriptions/sub").status_code == 404
    assert http.put(f"{base}/subscriptions/sub", json={"topic": topic}).status_code == 200
    body = {"subscription": {field: value}, "updateMask": field}
    updated = http.patch(f"{base}/subscriptions/sub", json=body)
    assert updated.status_code == 400
    assert error(updated)["message"] == error(created)["message"]


def test_an_empty_delivery_config_is_refused_too(http: httpx.Client, base: str) -> None:
    topic = make_topic(http, base)
    response = http.put(f"{base}/subscriptions/sub", json={"topic": topic, "bigqueryConfig": {}})
    assert response.status_code == 400
    assert "BigQuery subscriptions are not built" in error(response)["message"]
    empty_key = http.put(f"{base}/topics/top4", json={"kmsKeyName": ""})
    assert empty_key.status_code == 200  # an empty key asks for nothing


# -- methods that are not built -------------------------------------------------------------


def _discovery_methods() -> list[tuple[str, str, str]]:
    """Every method of pubsub v1 as Google's discovery document (shipped in
    google-api-python-client) lists it: verb, path with names filled in, id."""
    path = Path(googleapiclient.__file__).parent / "discovery_cache/documents/pubsub.v1.json"
    doc = json.loads(path.read_text())
    out = []

    def walk(resource: dict[str, Any]) -> None:
        for child in resource.get("resources", {}).values():
            walk(child)
        for method in resource.get("methods", {}).values():
            filled = method["flatPath"]
            for param in method.get("parameterOrder", []):
                filled = filled.replace(
                    "{" + param + "}", "x-1" if param != "projectsId" else "demo"
                )
            filled = filled.replace("{projectsId}", "demo")
            for token in ("{topicsId}", "{subscriptionsId}", "{snapshotsId}", "{schemasId}"):
                filled = filled.replace(token, "x-1")
            out.append((method["httpMethod"], "/" + filled, method["id"]))

    walk(doc)
    return out


def test_every_pubsub_method_is_served_or_unimplemented(http: httpx.Client) -> None:
    """Not built is UNIMPLEMENTED (501), never NOT_FOUND: clients must be able to tell
    a method that is missing from a resource that is."""
    methods = _discovery_methods()
    assert len(methods) > 40
    unimplemented = []
    for verb, path, method_id in methods:
        response = http.request(verb, path, json={} if verb in ("POST", "PUT", "PATCH") else None)
        if response.status_code == 501:
            assert error(response)["status"] == "UNIMPLEMENTED"
            assert method_id in error(response)["message"]
            unimplemented.append(method_id)
        else:  # served: whatever it answers, it is not "no such route"
            assert response.status_code != 405, (method_id, response.text)
            assert not (
                response.status_code == 404 and error(response)["message"] == "Not Found"
            ), method_id
    assert http.get("/v1/projects/demo/no-such-collection").status_code == 404


# -- attributes -----------------------------------------------------------------------------


def test_googclient_attributes_are_accepted_and_other_goog_keys_refused(
    http: httpx.Client, base: str
) -> None:
    """Google's client adds googclient_traceparent when OpenTelemetry tracing is on."""
    topic = make_topic(http, base)
    assert http.put(f"{base}/subscriptions/sub", json={"topic": topic}).status_code == 200
    traced = {"data": "eA==", "attributes": {"googclient_traceparent": "00-abc-def-01"}}
    assert http.post(f"{base}/topics/top:publish", json={"messages": [traced]}).status_code == 200
    for key in ("goog", "googtrace", "google_x", "goog_client"):
        bad = {"data": "eA==", "attributes": {key: "v"}}
        response = http.post(f"{base}/topics/top:publish", json={"messages": [bad]})
        assert response.status_code == 400, key
        assert "reserved" in error(response)["message"]
    pulled = http.post(f"{base}/subscriptions/sub:pull", json={"maxMessages": 10}).json()
    items = pulled["receivedMessages"]
    assert [i["message"]["attributes"] for i in items] == [
        {"googclient_traceparent": "00-abc-def-01"}
    ]


# -- deliveryAttempt ------------------------------------------------------------------------


def _pull(http: httpx.Client, base: str, sub: str) -> list[dict[str, Any]]:
    body = {"maxMessages": 10, "returnImmediately": True}
    items: list[dict[str, Any]] = http.post(f"{base}/subscriptions/{sub}:pull", json=body).json()[
        "receivedMessages"
    ]
    return items


def test_delivery_attempt_only_with_a_dead_letter_policy(http: httpx.Client, base: str) -> None:
    topic = make_topic(http, base)
    dead = make_topic(http, base, "dead")
    assert http.put(f"{base}/subscriptions/plain", json={"topic": topic}).status_code == 200
    policy = {"deadLetterTopic": dead, "maxDeliveryAttempts": 5}
    body = {"topic": topic, "deadLetterPolicy": policy}
    assert http.put(f"{base}/subscriptions/dlq", json=body).status_code == 200
    data = base64.b64encode(b"x").decode()
    assert http.post(f"{base}/topics/top:publish", json={"messages": [{"data": data}]}).is_success
    plain = _pull(http, base, "plain")
    assert len(plain) == 1 and "deliveryAttempt" not in plain[0]
    with_policy = _pull(http, base, "dlq")
    assert [i["deliveryAttempt"] for i in with_policy] == [1]
    for sub, items in (("plain", plain), ("dlq", with_policy)):
        nack = {"ackIds": [items[0]["ackId"]], "ackDeadlineSeconds": 0}
        assert http.post(f"{base}/subscriptions/{sub}:modifyAckDeadline", json=nack).is_success
    assert "deliveryAttempt" not in _pull(http, base, "plain")[0]
    assert _pull(http, base, "dlq")[0]["deliveryAttempt"] == 2


# -- /docs ----------------------------------------------------------------------------------


def test_docs_page_loads_everything_from_this_server(http: httpx.Client) -> None:
    """Swagger UI works offline: every script, style sheet and icon it names is served
    here (from the swagger-ui-py package), none from a CDN."""
    page = http.get("/docs")
    assert page.status_code == 200
    assets = re.findall(r'(?:src|href)="([^"]+)"', page.text)
    assert assets and all(url.startswith("/docs/assets/") for url in assets), assets
    for url in assets:
        served = http.get(url)
        assert served.status_code == 200, url
        assert len(served.content) > 1000
    assert "'/openapi.json'" in page.text or '"/openapi.json"' in page.text
    bundle = http.get("/docs/assets/swagger-ui-bundle.js").text
    assert "SwaggerUIBundle" in bundle
    assert http.get("/redoc").status_code == 404  # ReDoc would need a CDN
