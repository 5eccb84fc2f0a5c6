"""The FastAPI application: Google Cloud Pub/Sub REST v1 on the lake."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

import lakepubsub
from api import auth, console, errors, models
from api.deps import EngineDep, json_response
from api.grpc import GrpcDoor, oneport
from api.grpc.services import handlers
from api.rest import docs, schemas, snapshots, subscriptions, topics
from api.rest.fast import FastRoutes
from api.rest.middleware import Admission, LimitBody, Metrics
from lakepubsub import Engine, Settings, gc_tuning, push
from lakepubsub.peering.peers import Peering

DESCRIPTION = """\
Google Cloud Pub/Sub REST v1, served from Delta Lake tables. Point an unmodified
Google client at this URL. Extensions from the early Pub/Sub design: a
subscription's `truncationPolicy`, `:truncate`, `:nack`, and truncation events in
pull responses (`receivedMessages[].event`).
"""


def create_app(engine: Engine | None = None, *, grpc: bool | None = None) -> FastAPI:
    """The app; with no engine given, one is made from the environment at start-up.

    ``grpc`` (default: when no engine is given, as under ``lakepubsub serve``) also
    starts the gRPC door, which ``api.grpc.OnePortProtocol`` serves on the same port.
    """
    serve_grpc = engine is None if grpc is None else grpc

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.engine = engine or Engine(Settings.from_env())
        # A server (not an app around a given engine)
        # runs push delivery in a background thread; LAKEPUBSUB_PUSH=false turns it off.
        app.state.push = None
        peering = None
        if engine is None:
            # A server joins the lake's other API processes (LAKEPUBSUB_PEERING=false: not).
            peering = Peering.from_env(app.state.engine)
            if peering is not None:
                await run_in_threadpool(peering.start)
                app.state.engine.peering = peering
            app.state.push = await run_in_threadpool(push.start_from_env, app.state.engine)
        app.state.grpc = None
        if serve_grpc:
            app.state.grpc = GrpcDoor(app.state, handlers)
            await run_in_threadpool(app.state.grpc.start)
            oneport.install(app.state.grpc)
        if engine is None:  # a server process: its start-up heap is done
            gc_tuning.settle(app.state.engine.settings.gc_young_threshold)
        try:
            yield
        finally:
            if peering is not None:  # others commit their own requests from now on
                app.state.engine.peering = None
                await run_in_threadpool(peering.stop)
            if app.state.grpc is not None:  # streams end with UNAVAILABLE; clients reconnect
                oneport.install(None)
                await run_in_threadpool(app.state.grpc.stop)
            if app.state.push is not None:  # [push integration] settle in-flight pushes first
                await run_in_threadpool(app.state.push.stop)
            # Graceful shutdown: queued publishes commit, waiting pulls return.
            await run_in_threadpool(app.state.engine.close)

    app = FastAPI(
        title="lakepubsub",
        version=lakepubsub.__version__,
        description=DESCRIPTION,
        lifespan=lifespan,
        docs_url=None,  # api/rest/docs.py serves /docs with packaged assets
        redoc_url=None,  # ReDoc would load its script from a CDN
    )
    errors.install(app)
    # The message routes first. A request is tried against each route's pattern in
    # order, about 2 us each (47-54 us to reach publish or pull behind the IAM, topic
    # and subscription routes). Their paths end in literal verbs no other route has,
    # so going first changes no match.
    app.include_router(topics.messaging)
    app.include_router(subscriptions.messaging)
    # Publish is served before the router (api/rest/fast.py), inside access control.
    app.add_middleware(FastRoutes)
    auth.install(app)  # IAM routes first; access control middleware
    app.include_router(topics.router)
    app.include_router(subscriptions.router)
    app.include_router(snapshots.router)
    app.include_router(schemas.router)
    app.add_middleware(Metrics)
    app.add_middleware(LimitBody)
    app.add_middleware(Admission)  # outermost: a refusal costs no other middleware
    _add_operational_routes(app)
    docs.install(app)
    console.install(app)  # the web console at /console (docs/console.md)
    _document_models(app)
    return app


def _add_operational_routes(app: FastAPI) -> None:
    @app.get("/healthz", tags=["operations"], name="healthz")
    def healthz() -> Response:
        """Liveness: the process serves requests (no storage access)."""
        return json_response({"status": "ok"})

    @app.get("/readyz", tags=["operations"], name="readyz")
    def readyz(engine: EngineDep) -> Response:
        """Readiness: the lake's catalog can be read now."""
        engine.catalog.view(max_staleness_s=0)
        return json_response({"status": "ready"})

    @app.get("/metrics", tags=["operations"], name="metrics")
    def metrics() -> Response:
        """Prometheus metrics of this process."""
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)


def _document_models(app: FastAPI) -> None:
    """Schemas referenced by hand-parsed bodies (publish) must be in the document."""
    original = app.openapi

    def openapi() -> dict[str, object]:
        if app.openapi_schema:
            return app.openapi_schema
        schema = original()
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        for model in (models.PublishRequest, models.PubsubMessage, models.ErrorResponse):
            json_schema = model.model_json_schema(
                by_alias=True, ref_template="#/components/schemas/{model}"
            )
            for name, sub in json_schema.pop("$defs", {}).items():
                components.setdefault(name, sub)
            components[model.__name__] = json_schema
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
