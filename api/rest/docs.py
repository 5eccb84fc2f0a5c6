"""``/docs``: Swagger UI served from this server, with the assets the maintained
``swagger-ui-py`` package ships, so that the page works without the internet
(FastAPI's default loads them from a CDN)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from starlette.responses import HTMLResponse
from starlette.staticfiles import StaticFiles

ASSETS_URL = "/docs/assets"


def _assets_dir() -> Path:
    # Found without importing the package (its module loads jinja2 and yaml).
    spec = importlib.util.find_spec("swagger_ui")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("swagger-ui-py is not installed; reinstall lakepubsub")
    return Path(next(iter(spec.submodule_search_locations))) / "static"


def install(app: FastAPI) -> None:
    """Serve Swagger UI at ``/docs`` over the app's OpenAPI document."""
    app.mount(ASSETS_URL, StaticFiles(directory=_assets_dir()), name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    def docs() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=app.openapi_url or "/openapi.json",
            title=f"{app.title} - Swagger UI",
            swagger_js_url=f"{ASSETS_URL}/swagger-ui-bundle.js",
            swagger_css_url=f"{ASSETS_URL}/swagger-ui.css",
            swagger_favicon_url=f"{ASSETS_URL}/favicon-32x32.png",
        )
