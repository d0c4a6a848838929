"""Upcasters: lift stored payloads of old schema versions to the current one.

Stored history is never rewritten. When an event's shape changes, its class gets
a higher ``VERSION`` and one function here turns version N into N+1. Decoding
applies them in order, so the fold only ever sees current payloads.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from service.core.errors import UnknownEventType, UnknownSchemaVersion
from service.core.events import EVENT_TYPES, Event

Upcaster = Callable[[Mapping[str, Any]], dict[str, Any]]


def _download_progress_v1_v2(data: Mapping[str, Any]) -> dict[str, Any]:
    # v1 mirrored llama.cpp's {done, total}; v2 names the unit and adds rate/ETA.
    return {
        "job_id": data.get("job_id", ""),
        "bytes_done": int(data.get("done", 0)),
        "bytes_total": int(data.get("total", 0)),
        "bytes_per_second": None,
        "eta_seconds": None,
    }


UPCASTERS: Mapping[tuple[str, int], Upcaster] = {
    ("download_progress", 1): _download_progress_v1_v2,
}
"""(type, from_version) -> function producing the from_version + 1 payload."""


def upcast(type_: str, version: int, data: Mapping[str, Any]) -> dict[str, Any]:
    """Return ``data`` lifted to the current version of ``type_``.

    Raises :class:`UnknownEventType` for a type this code does not know and
    :class:`UnknownSchemaVersion` for a version newer than the code (written by
    a newer modelrouter) or with a missing upcaster: fail loudly, never guess.
    """
    cls = EVENT_TYPES.get(type_)
    if cls is None:
        raise UnknownEventType(type_)
    if version > cls.VERSION or version < 1:
        raise UnknownSchemaVersion(type_, version, cls.VERSION)
    current = dict(data)
    while version < cls.VERSION:
        step = UPCASTERS.get((type_, version))
        if step is None:
            raise UnknownSchemaVersion(type_, version, cls.VERSION)
        current = step(current)
        version += 1
    return current


def decode(type_: str, version: int, data: Mapping[str, Any]) -> Event:
    """Upcast and build the typed event."""
    payload = upcast(type_, version, data)  # raises for unknown types first
    return EVENT_TYPES[type_].from_data(payload)
