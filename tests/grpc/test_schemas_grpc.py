"""The schema API over gRPC: Google's clients with nothing but ``PUBSUB_EMULATOR_HOST``."""

from __future__ import annotations

from google.cloud import pubsub_v1
from grpckit import Names, Serve
from schemakit import Clients, run_walks


def test_google_clients_over_grpc(
    emulator: Serve,
    publisher: pubsub_v1.PublisherClient,
    subscriber: pubsub_v1.SubscriberClient,
    names: Names,
) -> None:
    run_walks(
        lambda: Clients(pubsub_v1.SchemaServiceClient(), publisher, subscriber, "grpc", names.tag)
    )
