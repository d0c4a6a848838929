"""The instance supervisor's decisions about process ends: a reaped worker, a failed spawn, a
restart timer (re-exported by :mod:`service.core.instance_decisions`).

Pure module: stdlib only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import service.core.events as ev
import service.core.instance_lifecycle as lifecycle
from service.core.decision import Append, Decision, Effect, about, nothing
from service.core.demand_queue import RestartArmed
from service.core.processes import ProcessExit
from service.core.state import UNRESPONSIVE, RouterState


@dataclass(frozen=True, slots=True)
class Warn(Effect):
    """A warning for the log: something an operator should see that changes no state."""

    event: str
    fields: Mapping[str, object] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ArmRestart(Effect):
    """Once the crash is folded, arm ``model``'s restart timer (:func:`restart_timer`)."""

    model: str


# --- process ends -------------------------------------------------------------------------------


def decide_exit(state: RouterState, model: str, instance_id: str, exit: ProcessExit, in_flight: int) -> Decision[bool]:
    """The end to record once the worker was reaped (``instance_lifecycle.on_process_exit``);
    answers whether it was a crash (then its restart timer is armed once the crash is folded)."""
    events = lifecycle.on_process_exit(state, model, instance_id, exit, in_flight)
    crashed = any(isinstance(e, ev.InstanceCrashed) for e in events)
    restart = crashed or _hung(state, model, events)
    return Decision(crashed, about(model, events), (ArmRestart(model),) if restart else ())


def _hung(state: RouterState, model: str, events: list[ev.Event]) -> bool:
    """Whether the worker ended after it was given up as hung (``instance_unresponsive``): a failure
    for ``restart = on-failure``, whether the service records the end or the worker did."""
    if any(isinstance(e, ev.InstanceStopped) and e.reason == UNRESPONSIVE for e in events):
        return True
    found = state.models.get(model)
    error = found.last_error if found is not None else None
    return (
        not events
        and found is not None
        and found.instance is None
        and found.failed
        and (error is not None and error.reason == UNRESPONSIVE)
    )


def restart_timer(state: RouterState, model_name: str, jitter: float, mono: float) -> tuple[Effect, ...]:
    """``restart = on-failure``: the timer for a crashed model (capped exponential backoff), or a
    warning when the backoff ran out."""
    model = state.models.get(model_name)
    if model is None:
        return ()
    delay = lifecycle.restart_delay(model, jitter)
    if delay is not None:
        return (RestartArmed(model_name, mono + delay),)
    if model.config.restart == "on-failure":
        return (Warn("restart_gave_up", {"model": model_name, "crashes": model.crash_count}),)
    return ()


def decide_spawn_failed(state: RouterState, model: str, instance_id: str, message: str) -> Decision[None]:
    """``starting -> failed(spawn_failed)`` unless the instance already ended."""
    if lifecycle.current_instance(state, model, instance_id) is None:
        return nothing(None)
    failed = ev.InstanceLoadFailed(instance_id=instance_id, reason="spawn_failed", message=message)
    return Decision(None, (Append(failed, model),))


def decide_closed(state: RouterState, instance_id: str) -> Decision[None]:
    """A stop for an instance whose worker never ran (stopped before its spawn, or the spawn failed):
    its end, unless that is recorded already."""
    for model in state.models.values():
        inst = model.instance
        if inst is not None and inst.instance_id == instance_id:
            stopped = ev.InstanceStopped(instance_id=instance_id, reason=inst.stop_reason or "unload")
            return Decision(None, (Append(stopped, model.name),))
    return nothing(None)
