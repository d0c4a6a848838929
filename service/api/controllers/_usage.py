"""``GET /usage``: who used which model, how much and how fast, summed from the log's
``request_completed`` events by :func:`service.core.usage.usage_report` (issue 34).

A key that sees only its own usage (a named key without ``admin``) reads it with its own name as the
``key`` filter, and is refused (403) another key's (:func:`service.core.usage.usage_scope`).
"""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import Annotated

from litestar import get
from litestar.params import Parameter, SkipValidation

from service.api.problems import Problem
from service.api.refusals import refusal_problem
from service.api.schemas import UsageRowView, UsageView, problems
from service.core.errors import CommandRejected
from service.core.events import RequestCompleted
from service.core.keys import Principal, Refusal
from service.core.usage import GROUPS, UsageRecord, UsageRow, parse_moment, usage_record, usage_report, usage_scope
from service.event_store.async_store import AsyncEventStore
from service.event_store.codec import format_time
from service.event_store.live_state import LiveState
from service.event_store.statements import EventFilter
from service.supervision.surroundings import Clock

_PAGE = 5000  # events per read: a day of a busy box in a few reads, a bounded reply each
_TYPES = (RequestCompleted.TYPE,)

KeyFilter = Annotated[str | None, Parameter(min_length=1, max_length=64, description="Only this key's requests")]
ModelFilter = Annotated[
    str | None, Parameter(min_length=1, max_length=512, description="Only this model's requests (name or alias)")
]
Moment = Annotated[
    str | None,
    Parameter(
        min_length=1,
        max_length=64,
        description="ISO-8601 date or date-time (UTC if no zone), or a duration ago: 24h, 7d",
    ),
]
GroupBy = Annotated[
    str | None, Parameter(min_length=1, max_length=8, description="key, model, day or hour (UTC); none: the total")
]


def _moment(name: str, text: str | None, now: datetime) -> datetime | None:
    if text is None:
        return None
    moment = parse_moment(text, now)
    if moment is None:
        why = "must be an ISO-8601 date or date-time, or a duration ago such as 30m, 24h or 7d"
        raise Problem(400, "invalid_request", f"query parameter {name!r}={text!r}: {why}", parameter=name)
    return moment


def _model(live: LiveState, name: str | None) -> str | None:
    """A model's canonical name (an alias resolves), else as given: a removed model keeps its usage."""
    if name is None:
        return None
    try:
        found = live.state.resolve(name)
    except CommandRejected:
        return name
    return found.name if found is not None else name


async def _records(store: AsyncEventStore, flt: EventFilter) -> list[UsageRecord]:
    found: list[UsageRecord] = []
    after = 0
    while True:
        page = await store.read(dataclasses.replace(flt, after=after))
        found += [r for r in map(usage_record, page) if r is not None]
        if len(page) < flt.limit:
            return found
        after = page[-1].position


def _row(row: UsageRow) -> UsageRowView:
    return UsageRowView(**dataclasses.asdict(row))


@get(
    "/usage",
    operation_id="getUsage",
    summary="Requests, tokens in and out, errors and p50/p95 duration per key, model, day or hour",
    tags=["usage"],
    responses=problems(400, 403),
)
async def get_usage(  # one argument per query parameter
    store: AsyncEventStore,
    live: LiveState,
    clock: SkipValidation[Clock],  # a Protocol: isinstance cannot check it
    caller: Principal,
    key: KeyFilter = None,
    model: ModelFilter = None,
    since: Moment = None,
    until: Moment = None,
    group_by: GroupBy = None,
) -> UsageView:
    """``GET /usage?key=&model=&since=&until=&group_by=key|model|day|hour``: sums over the proxied
    requests the log recorded (every node's, in a cluster). A named key without ``admin`` sees only
    its own usage (403 for another key's); a full key, an admin key or open mode sees every key's."""
    if group_by is not None and group_by not in GROUPS:
        why = "must be one of " + ", ".join(GROUPS)
        raise Problem(400, "invalid_request", f"query parameter 'group_by'={group_by!r}: {why}", parameter="group_by")
    scoped = usage_scope(caller, key)
    if isinstance(scoped, Refusal):
        raise refusal_problem(scoped, "/usage")
    now = clock.now()
    start, end = _moment("since", since, now), _moment("until", until, now)
    canonical = _model(live, model)
    flt = EventFilter(model=canonical, types=_TYPES, since=start, until=end, limit=_PAGE)
    report = usage_report(await _records(store, flt), key=scoped, model=canonical, group_by=group_by)
    return UsageView(
        group_by=group_by,
        key=scoped,
        model=canonical,
        since=format_time(start) if start is not None else None,
        until=format_time(end) if end is not None else None,
        rows=[_row(row) for row in report.rows],
        total=_row(report.total),
    )
