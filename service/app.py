"""``create_app(settings)``: the Litestar application and its lifespan
(the start-up sequence itself lives in :mod:`service.startup`)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import structlog
from litestar import Litestar, Request
from litestar.openapi import OpenAPIConfig

import service.startup as startup
from service import __version__
from service.api.auth import api_key_middleware
from service.api.controllers import reload_before_listing, route_handlers
from service.api.cors import cors_middleware
from service.api.deps import dependencies
from service.api.header_case import header_case_middleware
from service.api.middleware import request_id_middleware
from service.api.ollama import ollama_router
from service.api.problems import EXCEPTION_HANDLERS
from service.api.rate_gate import RateGate
from service.api.request import ApiRequest, reject_control_characters
from service.api.streams import EventStreams
from service.api.timeouts import io_timeout_middleware
from service.core.keys import NamedKey
from service.core.server_mode import may_be_single
from service.outside.world import SystemClock, new_request_id
from service.settings import Settings

_log = structlog.get_logger(__name__)


async def _before_request(request: Request[Any, Any, Any]) -> None:
    """Litestar takes one hook: reject bad query values first, then reload if asked."""
    await reject_control_characters(request)
    await reload_before_listing(request)


def create_app(settings: Settings) -> Litestar:
    """Build the app for ``settings``. Nothing is read from the environment here."""

    gate = RateGate(settings.node, settings.rate_window_s)

    @asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        runtime = await startup.start(settings)
        await gate.attach(runtime.live, runtime.store)  # before serving: the limits as the log left them
        # What the providers (service.api.deps) hand out, piece by piece.
        app.state.runtime = runtime
        app.state.streams = EventStreams()
        app.state.rate_gate = gate
        try:
            yield
        finally:
            await startup.stop(runtime)

    # The request schemas of single-model mode (model optional) whenever -m / -hf may make one
    # (service.core.server_mode): an -hf repo holding preset.ini is only known at start-up.
    single = may_be_single(model_file=settings.model_file is not None, hf_repo=bool(settings.hf_repo))
    app = Litestar(
        route_handlers=[
            *route_handlers(control_body_limit=settings.max_control_body_bytes, single=single),
            ollama_router(),
        ],
        dependencies=dependencies(),
        exception_handlers=EXCEPTION_HANDLERS,
        before_request=_before_request,
        request_class=ApiRequest,
        request_max_body_size=settings.max_body_bytes,
        lifespan=[lifespan],
        openapi_config=OpenAPIConfig(title="modelrouter", version=__version__, path="/schema"),
        logging_config=None,  # structlog is configured by the process (service.outside.logging_config)
        debug=False,
    )
    return _before_routing(app, settings, gate)


def _named_keys(app: Litestar) -> Mapping[str, NamedKey]:
    """The fold's named keys (none before the lifespan started the runtime)."""
    runtime = getattr(app.state, "runtime", None)
    return runtime.live.state.keys if runtime is not None else {}


def _before_routing(app: Litestar, settings: Settings, gate: RateGate) -> Litestar:
    """CORS (outermost: a 401 carries its headers too), the request id and the API key around the
    router itself, as llama-server runs them in its pre-routing handler: Litestar's ``middleware=``
    wraps only the routes, so an unknown path would be a 404 without CORS headers (unreadable by a
    browser page), its preflight a 404, and it would need no key."""
    handler = io_timeout_middleware(settings.timeout)(app.asgi_handler)  # llama-server's -to/--timeout
    clock = SystemClock()
    handler = api_key_middleware(settings.api_keys, lambda: _named_keys(app), clock.now, gate.admit_request)(handler)
    handler = request_id_middleware(new_request_id, clock)(handler)
    app.asgi_handler = header_case_middleware(cors_middleware(settings)(handler))  # names as llama-server's
    return app
