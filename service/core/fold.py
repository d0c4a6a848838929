"""The fold: ``fold(state, recorded) -> state``, one pure handler per event type.

The service's live state, the snapshots and ``modelrouter verify`` all go
through this one function. Handlers never raise on surprising input (a late
event from a replaced worker, a job the log never saw requested): they ignore
it, so that a log written by a crashing system still folds.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import Enum

import service.core.events as ev
import service.core.fold_catalogue as fold_catalogue
import service.core.fold_downloads as fold_downloads
import service.core.fold_instances as fold_instances
import service.core.fold_keys as fold_keys
import service.core.fold_nodes as fold_nodes
import service.core.fold_prompt_cache as fold_prompt_cache
from service.core.download_lifecycle import DOWNLOAD_LIFECYCLE
from service.core.fold_support import HANDLERS, job_of, model_of
from service.core.instance_lifecycle import INSTANCE_LIFECYCLE
from service.core.state import (
    InstanceStatus,
    JobStatus,
    RouterState,
    evolve,
)

_INSTANCE_KINDS = INSTANCE_LIFECYCLE.event_types()
_DOWNLOAD_KINDS = DOWNLOAD_LIFECYCLE.event_types()


def fold(state: RouterState, recorded: ev.Recorded) -> RouterState:
    """Apply one recorded event. Events at or below ``state.position`` are skipped,
    which makes re-delivery (tail overlap, snapshot + tail) harmless. A lifecycle
    event whose transition the tables in :mod:`service.core.transitions` do not
    allow is not applied: it is counted in ``state.anomalies``."""
    if recorded.position <= state.position:
        return state
    verdict = _check_transition(state, recorded)
    if verdict is None:
        handler = HANDLERS.get(type(recorded.event))
        new = handler(state, recorded) if handler is not None else state
        new = fold_nodes.after(state, new, recorded)
    elif verdict == _LATE:
        new = state
    else:
        new = evolve(state, anomalies=state.anomalies + 1, last_anomaly=f"#{recorded.position}: {verdict}")
    return evolve(new, position=recorded.position)


_LATE = "late"


def _check_transition(state: RouterState, rec: ev.Recorded) -> str | None:
    """None when the event may be applied, ``_LATE`` for a harmless late event,
    else why it is an impossible transition."""
    kind = rec.event.TYPE
    status: Enum | None
    if kind in _INSTANCE_KINDS:
        lifecycle, subject, status = INSTANCE_LIFECYCLE, "instance", _instance_status(state, rec)
    elif kind in _DOWNLOAD_KINDS:
        lifecycle, subject, status = DOWNLOAD_LIFECYCLE, "job", _job_status(state, rec)
    else:
        return None
    allowed, _ = lifecycle.next_status(status, kind)
    if allowed:
        return None
    if lifecycle.is_late(status, kind):
        return _LATE
    ident = getattr(rec.event, "instance_id", None) or getattr(rec.event, "job_id", None)
    shown = status.value if status is not None else "none"
    return f"{kind} for {subject} {ident} of {rec.model!r} in state {shown}"


def _instance_status(state: RouterState, rec: ev.Recorded) -> InstanceStatus | None:
    model = model_of(state, rec)
    inst = model.instance if model is not None else None
    if inst is None:
        return None
    if isinstance(rec.event, ev.InstanceRequested):
        return inst.status  # any live instance: a second one would be a phantom
    return inst.status if inst.instance_id == getattr(rec.event, "instance_id", None) else None


def _job_status(state: RouterState, rec: ev.Recorded) -> JobStatus | None:
    found = job_of(state, rec, str(getattr(rec.event, "job_id", "")))
    return found[1].status if found is not None else None


def replay(events: Iterable[ev.Recorded], state: RouterState | None = None) -> RouterState:
    """Fold a sequence of events onto ``state`` (or the empty state)."""
    current = state if state is not None else RouterState()
    for recorded in events:
        current = fold(current, recorded)
    return current


# The handler modules register themselves in HANDLERS when imported (above).
_REGISTERED = (fold_catalogue, fold_downloads, fold_instances, fold_keys, fold_nodes, fold_prompt_cache)
