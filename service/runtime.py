"""The objects one running service owns: built by :func:`service.startup.start` (the composition
root), injected into the API handlers, released by :func:`service.startup.stop`."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import httpx

from service.catalogue.sources import Catalogue
from service.event_store.async_store import AsyncEventStore
from service.event_store.statements import EventFilter
from service.live_state import LiveState
from service.metrics import RouterMetrics
from service.recovery.snapshotter import Snapshotter
from service.settings import Settings
from service.supervision.downloads import DownloadSupervisor
from service.supervision.instances import InstanceSupervisor
from service.supervision.removal import ModelRemover


@dataclass
class Runtime:
    settings: Settings
    store: AsyncEventStore
    live: LiveState
    downloads: DownloadSupervisor
    instances: InstanceSupervisor
    remover: ModelRemover
    snapshotter: Snapshotter
    http: httpx.AsyncClient
    metrics: RouterMetrics
    open_streams: int = 0
    background: set[asyncio.Task[Any]] = field(default_factory=set)
    stream_reads: dict[tuple[EventFilter, Any], asyncio.Future[Any]] = field(default_factory=dict)
    """Reads in flight for SSE streams: streams at the same place share one (service.api.controllers._events)."""
    catalogue: Catalogue | None = None  # set once the sources were read at start-up
    warnings: list[str] = field(default_factory=list)  # shown on /health (e.g. an open bind without a key)
