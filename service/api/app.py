"""``create_app(settings)``: the Litestar application and its lifespan.

Lifespan order: migrate -> open the store -> rebuild the fold -> record
``router_started`` -> serve; on exit record ``router_stopped`` and close.
"""

from __future__ import annotations

import asyncio
import os
from contextlib import asynccontextmanager
from typing import AsyncIterator

import structlog
from litestar import Litestar
from litestar.datastructures import State
from litestar.di import Provide
from litestar.openapi import OpenAPIConfig

from service import __version__
from service.api.events_controller import EventsController
from service.api.health_controller import health
from service.api.middleware import request_id_middleware
from service.api.models_controller import list_models, list_models_openai
from service.api.problems import EXCEPTION_HANDLERS
from service.api.runtime import Runtime
from service.core import events as ev
from service.event_store.async_store import AsyncEventStore
from service.event_store.codec import NewEvent
from service.event_store.migrate import upgrade
from service.live_state import LiveState
from service.settings import Settings

_log = structlog.get_logger(__name__)


def create_app(settings: Settings) -> Litestar:
    """Build the app for ``settings``. Nothing is read from the environment here."""

    @asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        settings.home.mkdir(parents=True, exist_ok=True)
        await asyncio.to_thread(upgrade, settings.db_path)
        store = AsyncEventStore(settings.db_path, source={"kind": "router"}, synchronous=settings.synchronous)
        live = LiveState(store)
        await live.start()
        runtime = Runtime(settings=settings, store=store, live=live)
        app.state.runtime = runtime
        started = ev.RouterStarted(pid=os.getpid(), version=__version__, host=settings.host, port=settings.port)
        await live.record([NewEvent(started)])
        _log.info("router_started", position=live.position, db=str(settings.db_path))
        try:
            yield
        finally:
            await live.record([NewEvent(ev.RouterStopped(pid=os.getpid(), reason="shutdown"))])
            await live.stop()
            await store.close()
            _log.info("router_stopped")

    def provide_runtime(state: State) -> Runtime:
        runtime: Runtime = state.runtime
        return runtime

    return Litestar(
        route_handlers=[health, list_models, list_models_openai, EventsController],
        dependencies={"runtime": Provide(provide_runtime, sync_to_thread=False)},
        exception_handlers=EXCEPTION_HANDLERS,
        middleware=[request_id_middleware],
        lifespan=[lifespan],
        openapi_config=OpenAPIConfig(title="modelrouter", version=__version__, path="/schema"),
        logging_config=None,  # structlog is configured by the process (service.logging_config)
        debug=False,
    )
