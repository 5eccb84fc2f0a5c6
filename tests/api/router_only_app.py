"""The server's app with publish left to FastAPI's router (no ``api/rest/fast.py``): the
reference that ``test_fast_routes.py`` holds the fast lane to."""

from __future__ import annotations

from fastapi import FastAPI

from api.app import create_app as server_app
from api.rest.fast import FastRoutes


def create_app() -> FastAPI:
    app = server_app()
    app.user_middleware = [m for m in app.user_middleware if m.cls is not FastRoutes]
    return app
