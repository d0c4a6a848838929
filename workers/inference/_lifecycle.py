"""The inference worker's own lifecycle: its states and the table of allowed transitions.

    loading --loaded--> ready                       instance_ready recorded
    loading --load_failed--> failed                 instance_load_failed next (unless a stop aborted the load)
    loading | ready | failed --stop--> stopping     instance_stopped next (nothing if the parent died)

Every change of state goes through :func:`next_state`. A pair the table does not
hold is an impossible transition and is refused: the state stays, as the fold
refuses one of the service's lifecycles (:mod:`service.core.transitions`, whose
table type this reuses). The refusals keep the worker's events in order: a load
that completes after a stop began records no ``instance_ready``, and a load that
fails then records no ``instance_load_failed`` either.
"""

from __future__ import annotations

from enum import Enum
from typing import Literal

from service.core.transitions import Lifecycle, edges


class WorkerState(str, Enum):
    """Where one inference worker is; ``/health`` answers with the value."""

    LOADING = "loading"  # port bound, instance_loading recorded, the engine thread loads the model
    READY = "ready"  # instance_ready recorded: serving
    FAILED = "failed"  # the load failed or was aborted; the main thread reports it and exits
    STOPPING = "stopping"  # draining on the way out


Trigger = Literal["loaded", "load_failed", "stop"]
"""What happened: the engine thread loaded the model or failed to, or a stop began (main thread)."""

_LOADING, _READY, _FAILED, _STOPPING = WorkerState.LOADING, WorkerState.READY, WorkerState.FAILED, WorkerState.STOPPING

WORKER_LIFECYCLE = Lifecycle(
    name="inference worker",
    table=edges(
        [
            ((_LOADING,), "loaded", _READY),
            ((_LOADING,), "load_failed", _FAILED),
            ((_LOADING, _READY, _FAILED), "stop", _STOPPING),
        ]
    ),
    late=frozenset(),
)


def next_state(state: WorkerState, trigger: Trigger) -> WorkerState | None:
    """The state ``trigger`` leads to from ``state``, or None: an impossible transition, refused."""
    allowed, after = WORKER_LIFECYCLE.next_status(state, trigger)
    return WorkerState(after) if allowed and after is not None else None
