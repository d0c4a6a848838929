"""The dashboard: ``/`` and ``/dashboard/*``, plain HTML, CSS and JS shipped as
package data (``service/api/static``), no build step. It uses the public API
only; docs/operations.md describes it. Public like ``/health``: the files hold
no data, and the page asks for the API key when a request answers 401."""

from __future__ import annotations

from pathlib import Path

from litestar import Router, get
from litestar.handlers import HTTPRouteHandler
from litestar.response import File
from litestar.static_files import create_static_files_router

STATIC = Path(__file__).parents[1] / "static"  # service/api/static: the package data (pyproject.toml)


@get("/", include_in_schema=False, sync_to_thread=False)
def dashboard_page() -> File:
    return File(STATIC / "index.html", content_disposition_type="inline", media_type="text/html")


dashboard_routes: list[HTTPRouteHandler | Router] = [
    dashboard_page,
    create_static_files_router(path="/dashboard", directories=[STATIC], name="dashboard", include_in_schema=False),
]
"""For the route collection (``service.api.controllers.route_handlers``)."""
