"""The API's providers: each hands a handler one piece of the running service.

``create_app`` registers :func:`dependencies` once, app-wide; a handler names the
pieces it uses as parameters (``live: LiveState``, ``settings: Settings``...) and
receives nothing else. The pieces come from the ``ServiceParts`` that
:func:`service.startup.start` (the composition root) keeps in ``app.state``, and
from the :class:`~service.api.streams.EventStreams` the lifespan puts beside it.

Types Litestar cannot check by ``isinstance`` (a Protocol such as the clock) are
declared ``SkipValidation[...]`` by the handlers that take them. Nothing a handler
must change is handed out as a bare collection: Litestar's validation gives the
handler a copy (so the background-task set travels inside ``Forwarding``, and the
read-only warnings as a tuple).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from litestar import Request
from litestar.datastructures import State
from litestar.di import Provide

from service.api.metrics import RouterMetrics
from service.api.parts import ServiceParts
from service.api.principal import principal_of
from service.api.proxy import Forwarding
from service.api.streams import EventStreams
from service.catalogue.sources import Catalogue
from service.core.keys import Principal
from service.core.server_mode import ServerMode
from service.event_store.async_store import AsyncEventStore
from service.event_store.live_state import LiveState
from service.settings import Settings
from service.supervision.downloads import DownloadSupervisor
from service.supervision.instances import InstanceSupervisor
from service.supervision.interpreter import Interpreter
from service.supervision.model_removal import ModelRemover
from service.supervision.sleep import SleepSnapshots
from service.supervision.startup_loads import StartupLoads
from service.supervision.surroundings import Clock
from service.supervision.worker_logs import WorkerLogs


def _runtime(state: State) -> ServiceParts:
    runtime: ServiceParts = state.runtime
    return runtime


def provide_settings(state: State) -> Settings:
    """The service's settings (limits, Hub endpoint and token, defaults such as autoload)."""
    return _runtime(state).settings


def provide_store(state: State) -> AsyncEventStore:
    """The event log, for reads (the audit query, history, replay of streams)."""
    return _runtime(state).store


def provide_live_state(state: State) -> LiveState:
    """The fold of the log and its tail: the state every answer is rendered from."""
    return _runtime(state).live


def provide_instances(state: State) -> InstanceSupervisor:
    """The inference instances: load, unload, requests queued and in flight."""
    return _runtime(state).instances


def provide_interpreter(state: State) -> Interpreter:
    """The one writer: a decision's events appended, then its effects performed; facts recorded."""
    return _runtime(state).interpreter


def provide_downloads(state: State) -> DownloadSupervisor:
    """The download jobs: request, cancel."""
    return _runtime(state).downloads


def provide_remover(state: State) -> ModelRemover:
    """Deleting a downloaded model's files."""
    return _runtime(state).remover


def provide_catalogue(state: State) -> Catalogue | None:
    """The model sources, for a reload; None until start-up has read them."""
    return _runtime(state).catalogue


def provide_metrics(state: State) -> RouterMetrics:
    """The router's own Prometheus series."""
    return _runtime(state).metrics


def provide_clock(state: State) -> Clock:
    """The service's clock (the supervisors' own), for "now" in answers."""
    return _runtime(state).clock


def provide_warnings(state: State) -> tuple[str, ...]:
    """What start-up warned about (an open bind without a key), for ``/health``."""
    return tuple(_runtime(state).warnings)


def provide_streams(state: State) -> EventStreams:
    """The open event streams' count and shared reads."""
    streams: EventStreams = state.streams
    return streams


def provide_forwarding(state: State) -> Forwarding:
    """What routing a request to its model's worker needs (:func:`service.api.proxy.proxy_request`)."""
    runtime = _runtime(state)
    return Forwarding(
        autoload=runtime.settings.autoload,
        instances=runtime.instances,
        live=runtime.live,
        interpreter=runtime.interpreter,
        http=runtime.http,
        metrics=runtime.metrics,
        clock=runtime.clock,
        mode=runtime.mode,
        conversations=runtime.conversations,
        nodes=runtime.nodes,
        forwarded=state.rate_gate.forwarded,
    )


def provide_mode(state: State) -> ServerMode:
    """Router or single-model mode (decided at start-up, once ``-hf`` / ``-m`` resolved)."""
    return _runtime(state).mode


def provide_snapshots(state: State) -> SleepSnapshots | None:
    """What sleeping models' workers answered last on ``/props`` and ``/metrics``."""
    return _runtime(state).snapshots


def provide_startup_loads(state: State) -> StartupLoads:
    """The models start-up asked to load that have not been ready yet (single-model ``/health``)."""
    return _runtime(state).startup_loads


def provide_worker_logs(state: State) -> WorkerLogs | None:
    """The workers' log files (``GET /models/{id}/logs``, ``GET /downloads/{job_id}/logs``)."""
    return _runtime(state).worker_logs


def provide_caller(request: Request[Any, Any, Any]) -> Principal:
    """Who makes the request (issue 34: :mod:`service.api.principal`)."""
    return principal_of(request)


def dependencies() -> dict[str, Provide]:
    """Every provider by the parameter name handlers use, for ``Litestar(dependencies=...)``."""
    providers: dict[str, Callable[..., object]] = {
        "settings": provide_settings,
        "store": provide_store,
        "live": provide_live_state,
        "instances": provide_instances,
        "interpreter": provide_interpreter,
        "downloads": provide_downloads,
        "remover": provide_remover,
        "catalogue": provide_catalogue,
        "metrics": provide_metrics,
        "clock": provide_clock,
        "warnings": provide_warnings,
        "streams": provide_streams,
        "forwarding": provide_forwarding,
        "mode": provide_mode,
        "snapshots": provide_snapshots,
        "startup_loads": provide_startup_loads,
        "worker_logs": provide_worker_logs,
        "caller": provide_caller,
    }
    return {name: Provide(provider, sync_to_thread=False) for name, provider in providers.items()}
