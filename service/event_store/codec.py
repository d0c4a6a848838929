"""Mapping between typed events and rows: ``NewEvent`` in, ``Recorded`` out."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from typing import Any, TypedDict

from service.core.decision import Append
from service.core.errors import InvalidEvent, UnknownEventType
from service.core.events import EVENT_TYPES, Event, EventPayload, EventSource, Recorded
from service.core.upcasting import decode

TIME_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"


@dataclass(frozen=True, slots=True)
class NewEvent:
    """An event about to be appended. ``event_id`` makes retries idempotent:
    appending the same id twice stores it once and returns the first position."""

    event: Event
    model: str | None = None
    event_id: str = field(default_factory=lambda: str(uuid.uuid4()))


def from_append(append: Append) -> NewEvent:
    """A decision's :class:`~service.core.decision.Append` as a ``NewEvent`` (its own id, if it has one)."""
    if append.event_id is None:
        return NewEvent(append.event, model=append.model)
    return NewEvent(append.event, model=append.model, event_id=append.event_id)


def new_event(type_: str, data: EventPayload, model: str | None = None, event_id: str | None = None) -> NewEvent:
    """A ``NewEvent`` from a type string and a current-version JSON payload.

    For payloads that arrive as JSON (tools, fixtures); code builds the event
    classes directly. Strict like every write: an unknown type raises
    :class:`UnknownEventType`, unknown or missing fields :class:`InvalidEvent`."""
    cls = EVENT_TYPES.get(type_)
    if cls is None:
        raise UnknownEventType(type_)
    return NewEvent(event=cls.from_data(data), model=model, event_id=event_id or str(uuid.uuid4()))


def format_time(moment: datetime) -> str:
    """Fixed-width UTC text; lexical order equals time order."""
    return moment.astimezone(UTC).strftime(TIME_FORMAT)


def parse_time(text: str) -> datetime:
    """Inverse of :func:`format_time`.

    ``strptime`` costs ~4 us; replaying a million events spends seconds in it.
    Text in exactly ``format_time``'s shape goes through ``fromisoformat``
    (~0.1 us, same value, tz ``timezone.utc``); anything else keeps the strict
    ``strptime`` path so what is accepted and rejected does not change."""
    if (
        len(text) == 27
        and text[26] == "Z"
        and text[10] == "T"
        and text[19] == "."
        and text[4] == text[7] == "-"
        and text[13] == text[16] == ":"
        and text.isascii()
    ):
        try:
            return datetime.fromisoformat(text)
        except ValueError:
            pass  # let strptime produce its own error message
    return datetime.strptime(text, TIME_FORMAT).replace(tzinfo=UTC)


def dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def encode(new: NewEvent, source_json: str, recorded_at: str) -> tuple[Any, ...]:
    """Row parameters in the column order of the insert statement.

    Every writer's rows pass here, inside its transaction: an event that is not
    exactly a registered class (the base ``Event``, an unregistered subclass)
    raises :class:`InvalidEvent` and the whole batch rolls back."""
    event = new.event
    if EVENT_TYPES.get(event.TYPE) is not type(event):
        raise InvalidEvent(event.TYPE, reason=f"{type(event).__name__} is not the registered class of its TYPE")
    return (
        new.event_id,
        event.TYPE,
        event.VERSION,
        new.model,
        dumps(event.to_data()),
        source_json,
        recorded_at,
    )


_raw_decode = json.JSONDecoder().raw_decode


def loads(text: str | bytes) -> Any:
    """``json.loads`` at about half the cost for the compact text ``dumps`` writes.

    ``json.loads`` runs two whitespace regexes around ``raw_decode``; stored
    JSON has no surrounding whitespace, so decode directly and fall back to
    ``json.loads`` (same result, same errors) whenever the text is not fully
    consumed or fails."""
    if isinstance(text, str):
        try:
            value, end = _raw_decode(text)
        except ValueError:
            return json.loads(text)
        if end == len(text):
            return value
    return json.loads(text)


def _loads(value: Any) -> Any:
    return loads(value) if isinstance(value, (str, bytes)) else value


PayloadDecoder = Callable[[EventPayload], Event]
_DECODERS: dict[tuple[str, int], PayloadDecoder] = {}


def _current_decoder(cls: type[Event]) -> PayloadDecoder:
    names = frozenset(f.name for f in fields(cls))
    count = len(names)
    type_, version = cls.TYPE, cls.VERSION

    def build(data: EventPayload) -> Event:
        # The common case (exactly the class's keys -- every row ``encode``
        # writes -- and no lists to freeze) skips the copy, key filtering,
        # zero-filling and list->tuple walk of ``decode``; the result is equal.
        # Anything else takes ``decode`` itself, errors included.
        if type(data) is dict and len(data) == count and names.issuperset(data):
            for value in data.values():
                if isinstance(value, list):
                    return decode(type_, version, data)
            return cls(**data)
        return decode(type_, version, data)

    return build


def payload_decoder(type_: str, version: int) -> PayloadDecoder:
    """The cached ``data -> Event`` function for one ``(type, schema_version)``.

    The current version of a known type needs no upcasting, so it gets a direct
    builder; old versions go through :func:`service.core.upcasting.decode`, and
    unknown types or versions raise the same errors ``decode`` raises."""
    key = (type_, version)
    found = _DECODERS.get(key)
    if found is None:
        cls = EVENT_TYPES.get(type_)
        if cls is not None and version == cls.VERSION:
            found = _current_decoder(cls)
            _DECODERS[key] = found
        else:
            return lambda data: decode(type_, version, data)
    return found


def to_recorded(row: Sequence[Any]) -> Recorded:
    """Decode ``(position, event_id, type, schema_version, model, data, source, recorded_at)``,
    upcasting old versions to the current event class."""
    position, event_id, type_, version, model, data, source, recorded_at = row
    version = int(version)
    return Recorded(
        int(position),
        str(event_id),
        model,
        payload_decoder(type_, version)(_loads(data)),
        _loads(source),
        parse_time(recorded_at),
    )


def decode_rows(rows: Iterable[Sequence[Any]]) -> list[Recorded]:
    """:func:`to_recorded` over a page of rows, for replay.

    Equal results, fewer repeated costs: rows of one append share ``recorded_at``
    and usually ``source`` text, so each distinct value is parsed once per page
    (the parsed ``source`` mapping is shared between those records; treat it as
    read-only, as ``Recorded.source``'s ``Mapping`` type says)."""
    out: list[Recorded] = []
    append = out.append
    sources: dict[Any, Any] = {}
    last_time_text: Any = None  # recorded_at is NOT NULL, so the first row always parses its own
    last_time = datetime.min
    for position, event_id, type_, version, model, data, source, recorded_at in rows:
        version = int(version)
        build = _DECODERS.get((type_, version)) or payload_decoder(type_, version)
        event = build(loads(data) if isinstance(data, (str, bytes)) else data)
        if isinstance(source, (str, bytes)):
            parsed = sources.get(source)
            if parsed is None:
                parsed = sources[source] = loads(source)
        else:
            parsed = source
        if recorded_at != last_time_text:
            last_time_text, last_time = recorded_at, parse_time(recorded_at)
        append(Recorded(int(position), str(event_id), model, event, parsed, last_time))
    return out


class WireEvent(TypedDict):
    """One event as ``GET /events`` and SSE ``data:`` carry it (:class:`service.api.schemas.EventView`)."""

    position: int
    id: str
    type: str
    schema_version: int
    model: str | None
    data: EventPayload
    source: EventSource
    recorded_at: str


def to_wire(recorded: Recorded) -> WireEvent:
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
