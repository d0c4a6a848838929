"""The dashboard: ``/`` and ``/dashboard/*``, plain HTML, CSS and JS shipped as
package data (``service/api/static``), no build step. It uses the public API
only; docs/operations.md describes it. Public like ``/health``: the files hold
no data, and the page asks for the API key when a request answers 401.

``/`` is also Ollama's health probe: a client that does not ask for HTML (``curl``, the
``ollama`` libraries, front-ends checking the URL) gets Ollama's ``Ollama is running``, and
``HEAD /`` answers 200; browsers, which send ``Accept: text/html``, get the dashboard."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from litestar import Request, Response, Router, get, head
from litestar.handlers import HTTPRouteHandler
from litestar.response import File
from litestar.static_files import create_static_files_router

STATIC = Path(__file__).parents[1] / "static"  # service/api/static: the package data (pyproject.toml)


OLLAMA_RUNNING = "Ollama is running"


@get("/", include_in_schema=False, sync_to_thread=False)
def dashboard_page(request: Request[Any, Any, Any]) -> Response[Any]:
    if "text/html" not in request.headers.get("accept", ""):
        return Response(OLLAMA_RUNNING, media_type="text/plain")
    return File(STATIC / "index.html", content_disposition_type="inline", media_type="text/html")


@head("/", include_in_schema=False, sync_to_thread=False, media_type="text/plain")
def root_head() -> None:
    """Ollama's ``HEAD /`` probe (``ollama`` clients and front-ends check the server this way)."""


dashboard_routes: list[HTTPRouteHandler | Router] = [
    dashboard_page,
    root_head,
    create_static_files_router(path="/dashboard", directories=[STATIC], name="dashboard", include_in_schema=False),
]
"""For the route collection (``service.api.controllers.route_handlers``)."""
