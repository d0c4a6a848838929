"""Mapping between typed events and rows: ``NewEvent`` in, ``Recorded`` out."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Mapping, Sequence

from service.core.events import EVENT_TYPES, Event, Recorded
from service.core.upcasting import decode

TIME_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"


@dataclass(frozen=True, slots=True)
class NewEvent:
    """An event about to be appended. ``event_id`` makes retries idempotent:
    appending the same id twice stores it once and returns the first position."""

    event: Event
    model: str | None = None
    event_id: str = field(default_factory=lambda: str(uuid.uuid4()))


def new_event(type_: str, data: Mapping[str, Any], model: str | None = None, event_id: str | None = None) -> NewEvent:
    """Build a ``NewEvent`` from a type string and a current-version payload
    (the shape workers emit)."""
    cls = EVENT_TYPES[type_]
    event = cls.from_data(data)
    return NewEvent(event=event, model=model, event_id=event_id or str(uuid.uuid4()))


def format_time(moment: datetime) -> str:
    """Fixed-width UTC text; lexical order equals time order."""
    return moment.astimezone(timezone.utc).strftime(TIME_FORMAT)


def parse_time(text: str) -> datetime:
    return datetime.strptime(text, TIME_FORMAT).replace(tzinfo=timezone.utc)


def dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def encode(new: NewEvent, source_json: str, recorded_at: str) -> tuple[Any, ...]:
    """Row parameters in the column order of the insert statement."""
    return (
        new.event_id,
        new.event.TYPE,
        new.event.VERSION,
        new.model,
        dumps(new.event.to_data()),
        source_json,
        recorded_at,
    )


def _loads(value: Any) -> Any:
    return json.loads(value) if isinstance(value, (str, bytes)) else value


def to_recorded(row: Sequence[Any]) -> Recorded:
    """Decode ``(position, event_id, type, schema_version, model, data, source, recorded_at)``,
    upcasting old versions to the current event class."""
    position, event_id, type_, version, model, data, source, recorded_at = row
    return Recorded(
        position=int(position),
        event_id=str(event_id),
        model=model,
        event=decode(type_, int(version), _loads(data)),
        source=_loads(source),
        recorded_at=parse_time(recorded_at),
    )


def to_wire(recorded: Recorded) -> dict[str, Any]:
    """The JSON shape of ``GET /events`` and SSE ``data:``."""
    return {
        "position": recorded.position,
        "id": recorded.event_id,
        "type": recorded.type,
        "schema_version": recorded.event.VERSION,
        "model": recorded.model,
        "data": recorded.event.to_data(),
        "source": dict(recorded.source),
        "recorded_at": format_time(recorded.recorded_at),
    }
