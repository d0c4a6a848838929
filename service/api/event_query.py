"""The audit-query parameters shared by ``/events`` and ``/events/stream``.

Types, ranges and lengths are declared (the framework answers a bad value with
a 400 naming it); what a declaration cannot say is checked here: a ``type``
must name a known event type or a prefix of one (a typo must not look like an
empty history), a single-valued parameter is given at most once, and a time is
an ISO-8601 date or date-time.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

from litestar import Request
from litestar.params import Parameter

from service.api.problems import Problem
from service.core.events import EVENT_TYPES
from service.event_store.statements import EventFilter

MAX_LIMIT = 1000
DEFAULT_LIMIT = 100
MAX_POSITION = 2**63 - 1  # SQLite's INTEGER: a larger position cannot exist
KNOWN_TYPES = tuple(sorted(EVENT_TYPES))
_SINGLE = ("model", "since", "until", "after", "before", "limit")

Position = Annotated[int | None, Parameter(ge=0, le=MAX_POSITION, description="An event position (exclusive bound)")]
Moment = Annotated[
    str | None, Parameter(min_length=1, max_length=64, description="ISO-8601 date or date-time (UTC if no zone)")
]
ModelFilter = Annotated[str | None, Parameter(min_length=1, max_length=512, description="Only this model's events")]
NodeFilter = Annotated[
    str | None, Parameter(min_length=1, max_length=512, description="Only events a cluster node wrote (source.node)")
]
TypeFilter = Annotated[
    list[str] | None,
    Parameter(
        query="type",
        description="Event type, or a prefix ending in '*' (repeatable): " + ", ".join(KNOWN_TYPES),
        max_items=64,
    ),
]
Limit = Annotated[int, Parameter(ge=1, le=MAX_LIMIT, description="Page size")]
LastEventId = Annotated[
    int | None,
    Parameter(header="Last-Event-ID", ge=0, le=MAX_POSITION, description="Resume after this position"),
]


def _bad(name: str, value: str, why: str, **extra: Any) -> Problem:
    return Problem(400, "invalid_request", f"query parameter {name!r}={value!r}: {why}", parameter=name, **extra)


def _time(name: str, value: str | None) -> datetime | None:
    if value is None:
        return None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00").replace(" ", "+"))
    except ValueError:
        raise _bad(name, value, "must be an ISO-8601 date or date-time") from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _type(value: str) -> str:
    if not value or "*" in value[:-1]:
        raise _bad("type", value, "must be an event type, optionally ending with '*' for a prefix")
    matches = [t for t in KNOWN_TYPES if t.startswith(value[:-1])] if value.endswith("*") else [value]
    if not matches or (not value.endswith("*") and value not in EVENT_TYPES):
        raise _bad(
            "type", value, "matches no event type; known types: " + ", ".join(KNOWN_TYPES), known_types=KNOWN_TYPES
        )
    return value


def check_single(request: Request[Any, Any, Any]) -> None:
    """A filter given twice is ambiguous: 400 rather than silently using one."""
    for name in _SINGLE:
        given = request.query_params.getall(name, [])
        if len(given) > 1:
            raise _bad(name, given[-1], "may be given only once")


def event_filter(  # one argument per declared query parameter
    *,
    model: str | None,
    types: list[str] | None,
    since: str | None,
    until: str | None,
    after: int | None,
    before: int | None,
    limit: int,
    node: str | None = None,
) -> EventFilter:
    """The store's filter for validated parameters."""
    return EventFilter(
        node=node,
        after=after,
        before=before,
        model=model,
        types=tuple(_type(t) for t in types or ()),
        since=_time("since", since),
        until=_time("until", until),
        limit=limit,
    )
