"""Parse and validate the audit-query parameters shared by ``/events`` and
``/events/stream``. Every bad value is a 400 problem naming the parameter."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime

from service.api.problems import Problem
from service.event_store.statements import EventFilter

MAX_LIMIT = 1000
DEFAULT_LIMIT = 100


def _bad(name: str, value: str, why: str) -> Problem:
    return Problem(400, "invalid_request", f"query parameter {name!r}={value!r}: {why}", parameter=name)


def _position(name: str, value: str) -> int:
    if not value.isdigit():
        raise _bad(name, value, "must be a non-negative integer position")
    return int(value)


def _time(name: str, value: str) -> datetime:
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00").replace(" ", "+"))
    except ValueError:
        raise _bad(name, value, "must be an ISO-8601 date or date-time") from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _limit(value: str) -> int:
    try:
        limit = int(value)
    except ValueError:
        raise _bad("limit", value, "must be an integer") from None
    if not 1 <= limit <= MAX_LIMIT:
        raise _bad("limit", value, f"must be between 1 and {MAX_LIMIT}")
    return limit


def _type(value: str) -> str:
    if not value or "*" in value[:-1]:
        raise _bad("type", value, "must be an event type, optionally ending with '*' for a prefix")
    return value


_ONE: dict[str, Callable[[str, str], object]] = {
    "after": _position,
    "before": _position,
    "since": _time,
    "until": _time,
    "limit": lambda _n, v: _limit(v),
    "model": lambda _n, v: v,
}


def parse_filter(params: Mapping[str, Sequence[str]], *, after_default: int | None = None) -> EventFilter:
    """Build an :class:`EventFilter` from repeated query values (``type`` may repeat)."""
    values: dict[str, object] = {"limit": DEFAULT_LIMIT}
    if after_default is not None:
        values["after"] = after_default
    for name, convert in _ONE.items():
        given = params.get(name) or []
        if len(given) > 1:
            raise _bad(name, given[-1], "may be given only once")
        if given:
            values[name] = convert(name, given[0])
    types = tuple(_type(t) for t in params.get("type", []) or [])
    return EventFilter(types=types, **values)  # type: ignore[arg-type]  # each _ONE converter returns its field's type
