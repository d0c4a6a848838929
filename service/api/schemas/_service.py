"""``/health``, ``/props`` and the event log's wire shapes."""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from service.api.schemas._common import ErrorObject
from service.core.events import EventPayload, EventSource


class EventView(msgspec.Struct, frozen=True):
    """One event of the log, as ``GET /events`` and SSE ``data:`` carry it.
    ``data`` depends on ``type`` (``docs/event-catalogue.md``)."""

    position: int
    id: str
    type: str
    schema_version: int
    model: str | None
    data: EventPayload
    source: EventSource
    recorded_at: str


class EventPage(msgspec.Struct, frozen=True):
    """``GET /events``: page on with ``after=next_after`` while it is not null."""

    events: list[EventView]
    next_after: int | None


class TailView(msgspec.Struct, frozen=True):
    """How current the live state is."""

    up: bool
    head: int
    lag_events: int
    lag_ms: float
    restarts: int
    last_error: str | None


class HealthView(msgspec.Struct, frozen=True):
    """``GET /health`` (503 with ``"status": "degraded"`` while the tail is down or behind, or
    while the log's disk is full; in single-model mode 503 ``"loading"`` with llama-server's
    ``error`` until its model is loaded)."""

    status: Literal["ok", "degraded", "loading"]
    version: str
    position: int
    tail: TailView
    open_streams: int
    queued_requests: int
    requests_in_flight: int
    in_flight_by_model: dict[str, int]
    """Requests being answered, per model with any (``modelrouter ps``)."""
    anomalies: int
    last_anomaly: str | None
    warnings: list[str]
    """Warnings worth an operator's eye: from start-up (an open bind without an API key, say), and
    while the log's disk is full, that the log cannot be written (the status is then degraded)."""
    error: ErrorObject | msgspec.UnsetType = msgspec.UNSET
    """llama-server's ``{"code": 503, "message": "Loading model", "type": "unavailable_error"}``."""


class GenerationSettings(msgspec.Struct, frozen=True):
    """A placeholder llama.cpp's router sends so its web UI does not break."""

    params: dict[str, Any]  # free-form: llama.cpp's router sends {} here, its web UI reads any member
    n_ctx: int


class RouterProps(msgspec.Struct, frozen=True):
    """``GET /props`` without ``?model=``: llama.cpp router's own properties."""

    role: Literal["router"]
    max_instances: int
    models_autoload: bool
    model_alias: str
    model_path: str
    default_generation_settings: GenerationSettings
    build_info: str
    ui_settings: dict[str, Any] = msgspec.field(default_factory=dict)  # free-form: llama.cpp's --ui-config JSON
    """llama.cpp's web UI defaults (``--ui-config``); none: its web UI is not served here."""
    cors_proxy_enabled: bool = False
    """llama.cpp's MCP CORS proxy (``--ui-mcp-proxy``): ``/cors-proxy`` is always its 403 here."""
