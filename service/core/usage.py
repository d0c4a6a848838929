"""Usage from the log (issue 34): who used which model, how much, how fast, over a time range.

Every proxied request's ``request_completed`` names its caller (``key``), its model (the envelope's),
its tokens (prompt and completion, as llama-server counts them), its status and its duration, so usage
is a query over the log, not a new store. :func:`usage_report` sums those events per group (a key, a
model, a UTC day or hour) and in total; :func:`usage_scope` decides which keys' usage a caller may
see. Pure: stdlib only.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from service.core.event_base import Recorded
from service.core.events import RequestCompleted
from service.core.keys import ADMIN, ANONYMOUS, Principal, Refusal

GROUPS = ("key", "model", "day", "hour")
"""What ``group_by`` may name."""

_RELATIVE = re.compile(r"(\d{1,6})([smhdw])")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


@dataclass(frozen=True, slots=True)
class UsageRecord:
    """One request as usage counts it."""

    at: datetime
    key: str
    model: str
    status: int
    duration_ms: float
    prompt_tokens: int
    completion_tokens: int


def usage_record(recorded: Recorded) -> UsageRecord | None:
    """The usage of a ``request_completed`` (None for any other event). Logs from before issue 34 name
    no key: their requests count as ``anonymous``; a count the answer did not state counts 0."""
    event = recorded.event
    if not isinstance(event, RequestCompleted):
        return None
    return UsageRecord(
        at=recorded.recorded_at,
        key=event.key or ANONYMOUS,
        model=recorded.model or "",
        status=event.status_code,
        duration_ms=event.duration_ms,
        prompt_tokens=event.prompt_tokens or 0,
        completion_tokens=event.completion_tokens or 0,
    )


@dataclass(frozen=True, slots=True)
class UsageRow:
    """The usage of one group (or the total): requests, tokens in and out, errors (status >= 400) and
    the median and 95th percentile of the duration (None without requests)."""

    group: str
    requests: int
    prompt_tokens: int
    completion_tokens: int
    errors: int
    p50_ms: float | None
    p95_ms: float | None


@dataclass(frozen=True, slots=True)
class UsageReport:
    rows: tuple[UsageRow, ...]
    total: UsageRow


def percentile(sorted_values: list[float], p: float) -> float | None:
    """The nearest-rank percentile ``p`` (0-100] of ascending values: a duration one request really took."""
    if not sorted_values:
        return None
    rank = max(1, math.ceil(p / 100 * len(sorted_values)))
    return sorted_values[rank - 1]


def _row(group: str, records: list[UsageRecord]) -> UsageRow:
    durations = sorted(r.duration_ms for r in records)
    return UsageRow(
        group=group,
        requests=len(records),
        prompt_tokens=sum(r.prompt_tokens for r in records),
        completion_tokens=sum(r.completion_tokens for r in records),
        errors=sum(1 for r in records if r.status >= 400),
        p50_ms=percentile(durations, 50),
        p95_ms=percentile(durations, 95),
    )


def group_of(record: UsageRecord, group_by: str) -> str:
    """The group ``record`` falls in: its key, its model, or its UTC day (``2026-01-31``) or hour
    (``2026-01-31T14:00Z``)."""
    if group_by == "key":
        return record.key
    if group_by == "model":
        return record.model
    at = record.at.astimezone(UTC)
    return at.strftime("%Y-%m-%d") if group_by == "day" else at.strftime("%Y-%m-%dT%H:00Z")


def usage_report(
    records: Iterable[UsageRecord], *, key: str | None = None, model: str | None = None, group_by: str | None = None
) -> UsageReport:
    """Sum ``records`` of ``key`` and ``model`` (None: any), per ``group_by`` (None: the total only).
    Rows come in the groups' order: keys and models by name, days and hours by time."""
    chosen = [r for r in records if (key is None or r.key == key) and (model is None or r.model == model)]
    groups: dict[str, list[UsageRecord]] = {}
    if group_by is not None:
        for record in chosen:
            groups.setdefault(group_of(record, group_by), []).append(record)
    rows = tuple(_row(group, groups[group]) for group in sorted(groups))
    return UsageReport(rows=rows, total=_row("total", chosen))


def sees_all(principal: Principal) -> bool:
    """A full key, no key at all (anonymous) or a named key with ``admin`` sees every key's usage."""
    return principal.scope is None or ADMIN in principal.scope.endpoints


def usage_scope(principal: Principal, asked: str | None) -> str | Refusal | None:
    """The ``key`` filter a caller's usage query runs with. A caller that sees all gets what it asked
    (None: every key); any other named key sees only its own usage: no ``key`` means its own, and
    another key's name is refused (403, so a script learns its mistake rather than reading its own
    numbers as another's), without saying whether that key exists."""
    if sees_all(principal):
        return asked
    if asked is None or asked == principal.name:
        return principal.name
    return Refusal(
        403,
        "usage_not_allowed",
        "usage: own key only",
        "this key may read only its own usage (a key with the admin endpoints reads every key's)",
    )


def parse_moment(text: str, now: datetime) -> datetime | None:
    """A time bound: ISO 8601 (UTC if no zone), or a duration before ``now`` (``90s``, ``30m``,
    ``24h``, ``7d``, ``2w``). None if it is neither."""
    relative = _RELATIVE.fullmatch(text.strip())
    if relative is not None:
        return now - timedelta(seconds=int(relative[1]) * _UNITS[relative[2]])
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00").replace(" ", "+"))
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
