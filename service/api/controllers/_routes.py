"""The route collection ``create_app`` registers: every controller's handlers, in one place.

Two groups with their own body limits: the control routes (``/models*``,
``/downloads*``) carry a model name, so they sit behind a Router with the small
``max_control_body_bytes``; everything else (inference bodies carry prompts)
gets the app's ``max_body_bytes``. Each group's explicit OPTIONS handlers come
first, before the handlers of their paths (see :mod:`._options` for why).
"""

from __future__ import annotations

from litestar import Router
from litestar.types import ControllerRouterHandler

from service.api.controllers._control import control_route
from service.api.controllers._dashboard import dashboard_routes
from service.api.controllers._disabled import disabled_routes
from service.api.controllers._downloads import cancel_download, download_model, get_download, list_downloads
from service.api.controllers._events import EventsController, models_sse
from service.api.controllers._health import health, health_v1
from service.api.controllers._history import model_history_endpoint
from service.api.controllers._keys import KEY_HANDLERS
from service.api.controllers._log_stream import stream_logs
from service.api.controllers._logs import download_logs
from service.api.controllers._metrics import get_metrics
from service.api.controllers._models import list_models, list_models_openai, load_model, remove_model, unload_model
from service.api.controllers._nodes import list_nodes
from service.api.controllers._options import options_handlers
from service.api.controllers._predict import predict_route
from service.api.controllers._proxy_routes import proxy_routes
from service.api.controllers._reload import reload_models
from service.api.controllers._stream_routes import stream_routes
from service.api.controllers._usage import get_usage

CONTROL_HANDLERS = (
    list_models,
    list_models_openai,
    download_model,
    load_model,
    unload_model,
    remove_model,
    list_downloads,
    get_download,
    cancel_download,
    download_logs,
    model_history_endpoint,
)
"""The routes behind the control body limit."""


def route_handlers(*, control_body_limit: int, single: bool = False) -> list[ControllerRouterHandler]:
    """Every route of the API, for ``Litestar(route_handlers=...)``; the control
    group limited to ``control_body_limit`` bytes of body; ``single``: the routed
    handlers as single-model mode declares them (``model`` optional)."""
    control = Router(
        path="/",
        route_handlers=[*options_handlers(CONTROL_HANDLERS), *CONTROL_HANDLERS],
        request_max_body_size=control_body_limit,
    )
    routed = [*proxy_routes(single=single), predict_route(single), control_route(single), *stream_routes]
    return [
        *options_handlers([*routed, get_metrics, *disabled_routes, *dashboard_routes]),
        health,
        health_v1,
        control,
        *routed,
        get_metrics,
        *disabled_routes,
        *dashboard_routes,
        EventsController,
        models_sse,
        stream_logs,
        reload_models,
        list_nodes,
        *KEY_HANDLERS,
        get_usage,
    ]
