"""The schema API over REST, judged by Google's clients (``transport="rest"``), and the
error shape of bad schema requests."""

from __future__ import annotations

import uuid

import httpx
import pytest
from google.api_core.client_options import ClientOptions
from google.auth.credentials import AnonymousCredentials
from google.cloud import pubsub_v1
from schemakit import PROTO, Clients, run_walks
from support import Server


@pytest.mark.parametrize("lake", ["local"], indirect=True)
def test_google_clients_over_rest(server: Server) -> None:
    def make() -> Clients:
        options = {
            "credentials": AnonymousCredentials(),
            "transport": "rest",
            "client_options": ClientOptions(api_endpoint=server.url),
        }
        return Clients(
            pubsub_v1.SchemaServiceClient(**options),
            pubsub_v1.PublisherClient(**options),
            pubsub_v1.SubscriberClient(**options),
            "rest",
            uuid.uuid4().hex[:8],
        )

    run_walks(make)


@pytest.mark.parametrize("lake", ["local"], indirect=True)
def test_bad_requests_get_pubsub_errors_and_change_nothing(http: httpx.Client) -> None:
    base = "/v1/projects/p/schemas"
    bad = http.post(base, params={"schemaId": "broken"}, json={"type": "AVRO", "definition": "{"})
    assert bad.status_code == 400
    error = bad.json()["error"]
    assert error["status"] == "INVALID_ARGUMENT"
    assert error["message"].startswith("Invalid Avro schema definition")
    assert http.get(f"{base}/broken").json()["error"]["status"] == "NOT_FOUND"

    missing_id = http.post(base, json={"type": "PROTOCOL_BUFFER", "definition": PROTO})
    assert missing_id.json()["error"]["message"] == "schemaId is required"
    unknown_type = http.post(base, params={"schemaId": "states"}, json={"type": "XML"})
    assert unknown_type.json()["error"]["status"] == "INVALID_ARGUMENT"

    made = http.post(base, params={"schemaId": "states"}, json={"type": 1, "definition": PROTO})
    assert made.status_code == 200
    body = made.json()
    assert body["type"] == "PROTOCOL_BUFFER" and body["definition"] == PROTO
    revision = body["revisionId"]
    only = http.delete(f"{base}/states:deleteRevision", params={"revisionId": revision})
    assert only.status_code == 400
    assert only.json()["error"]["status"] == "FAILED_PRECONDITION"
    no_revision = http.delete(f"{base}/states:deleteRevision")
    assert no_revision.json()["error"]["status"] == "INVALID_ARGUMENT"
    listed = http.get(f"{base}/states:listRevisions", params={"view": "FULL"}).json()
    assert [s["revisionId"] for s in listed["schemas"]] == [revision]
    assert http.get(f"{base}/states", params={"view": "BASIC"}).json() == {
        "name": "projects/p/schemas/states",
        "type": "PROTOCOL_BUFFER",
    }
    message = http.post(
        f"{base}:validateMessage",
        json={"name": "projects/p/schemas/states", "message": "////", "encoding": "BINARY"},
    )
    assert message.status_code == 400
    assert "failed schema validation" in message.json()["error"]["message"]
    both = http.post(
        f"{base}:validateMessage",
        json={"name": "projects/p/schemas/states", "schema": {"type": "AVRO"}, "message": ""},
    )
    assert both.json()["error"]["message"] == "Exactly one of name and schema is required"

    topic = http.put(
        "/v1/projects/p/topics/typed",
        json={"schemaSettings": {"schema": "projects/p/schemas/nothing", "encoding": "BINARY"}},
    )
    assert topic.status_code == 404
    assert http.get("/v1/projects/p/topics/typed").status_code == 404
    encoding = http.put(
        "/v1/projects/p/topics/typed",
        json={"schemaSettings": {"schema": "projects/p/schemas/states", "encoding": "XML"}},
    )
    assert encoding.json()["error"]["status"] == "INVALID_ARGUMENT"
