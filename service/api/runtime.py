"""The objects one running service owns, built by the lifespan and injected into handlers."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from service.event_store.async_store import AsyncEventStore
from service.live_state import LiveState
from service.settings import Settings


@dataclass
class Runtime:
    settings: Settings
    store: AsyncEventStore
    live: LiveState
    open_streams: int = 0
    extras: dict[str, Any] = field(default_factory=dict)
