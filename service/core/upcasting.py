"""Upcasters: lift stored payloads of old schema versions to the current one.

Stored history is never rewritten. When an event's shape changes, its class gets
a higher ``VERSION`` and one function here turns version N into N+1. Decoding
applies them in order, so the fold only ever sees current payloads.

Reading is tolerant where writing is strict (``Event.from_data``): a stored
payload may carry keys this code does not know (written by a newer
modelrouter; ignored) and may lack a required field (filled with the zero
value of its type -- ``""``, ``0``, ``()``, ``{}`` -- which is exactly the
default every required field had before fields became required, so old
rows read as they always did).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any

from service.core.errors import UnknownEventType, UnknownSchemaVersion
from service.core.events import EVENT_TYPES, Event, EventPayload, required_fields

Upcaster = Callable[[EventPayload], EventPayload]


def _download_progress_v1_v2(data: EventPayload) -> EventPayload:
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


def upcast(type_: str, version: int, data: EventPayload) -> EventPayload:
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


def decode(type_: str, version: int, data: EventPayload) -> Event:
    """Upcast and build the typed event from a *stored* payload (tolerant: see the module docstring)."""
    payload = upcast(type_, version, data)  # raises for unknown types first
    return stored_event(EVENT_TYPES[type_], payload)


def stored_event(cls: type[Event], data: EventPayload) -> Event:
    """``cls`` from a current-version stored payload: unknown keys ignored, missing
    required fields read as their zero value, lists frozen into tuples."""
    names, zeros = _reading_plan(cls)
    kwargs = {k: _frozen(v) for k, v in data.items() if k in names}
    for name, zero in zeros.items():
        if name not in kwargs:
            kwargs[name] = zero()
    return cls(**kwargs)


# Any (here and in the plans): a field's zero value is of that field's type.
_ZERO: Mapping[object, Callable[[], Any]] = {
    str: str,
    int: int,
    float: float,
    bool: bool,
    tuple: tuple,
    Mapping: dict,
}
_PLANS: dict[type[Event], tuple[frozenset[str], dict[str, Callable[[], Any]]]] = {}  # Any: as _ZERO's


def _reading_plan(cls: type[Event]) -> tuple[frozenset[str], dict[str, Callable[[], Any]]]:  # Any: as _ZERO's
    """Field names and, per required field, a factory for its zero value (computed once per class)."""
    plan = _PLANS.get(cls)
    if plan is None:
        hints = typing.get_type_hints(cls)
        zeros = {name: _zero_factory(cls, name, hints[name]) for name in required_fields(cls)}
        plan = _PLANS[cls] = (frozenset(f.name for f in dataclasses.fields(cls)), zeros)
    return plan


def _zero_factory(cls: type[Event], name: str, hint: object) -> Callable[[], Any]:  # Any: as _ZERO's
    origin = typing.get_origin(hint) or hint
    if origin in (typing.Union, types.UnionType):
        return type(None)
    factory = _ZERO.get(origin)
    if factory is None:
        msg = f"{cls.__name__}.{name}: no zero value for {hint!r}; extend upcasting._ZERO"
        raise TypeError(msg)
    return factory


def _frozen(value: Any) -> Any:  # Any: a stored value of any field type, frozen as it is
    # Lists become tuples so that events compare and hash like values.
    if isinstance(value, list):
        return tuple(_frozen(v) for v in value)
    return value
