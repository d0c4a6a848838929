"""The instance supervisor's decision about hung workers (:mod:`service.core.liveness` judges them).

Pure module: stdlib only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import service.core.cluster as cluster
import service.core.events as ev
from service.core.decision import Append, Decision, Effect
from service.core.instance_decisions import Facts, Stop
from service.core.liveness import Beat, bound_for, judge
from service.core.state import InstanceStatus, RouterState


@dataclass(frozen=True, slots=True)
class CutRequests(Effect):
    """Answer every request in flight to ``endpoint`` (``model``'s hung worker) with a 503 now,
    without waiting for the worker's end."""

    model: str
    endpoint: str


def decide_liveness(state: RouterState, beats: Mapping[str, Beat], facts: Facts, bound: float) -> Decision[None]:
    """Every ready worker of this node that :func:`judge` calls hung: ``instance_unresponsive``
    (``ready -> stopping``, reason ``unresponsive``), its requests cut, then its stop (SIGKILL after
    the stop grace). ``bound``: the global hang timeout; a model's preset key overrides it."""
    events: list[Append] = []
    effects: list[Effect] = []
    for model in cluster.own_view(state, facts.node).models.values():
        inst = model.instance
        beat = beats.get(inst.instance_id) if inst is not None else None
        if inst is None or beat is None or inst.status is not InstanceStatus.READY:
            continue
        limit = bound_for(model, bound)
        hang = judge(beat, facts.mono, limit)
        if hang is None:
            continue
        waiting = facts.busy.get(model.name, 0)
        seen = ev.InstanceUnresponsive(
            instance_id=inst.instance_id,
            cause=hang.cause,
            bound_s=limit,
            steps=hang.steps,
            last_step_s=hang.last_step_s,
            silent_s=hang.silent_s,
            requests_waiting=waiting,
        )
        events.append(Append(seen, model.name))
        effects += [CutRequests(model.name, inst.endpoint), Stop(inst.instance_id)]
    return Decision(None, tuple(events), tuple(effects))


def watched(state: RouterState, node: str | None, bound: float) -> dict[str, str]:
    """The workers to ask for heartbeats: this node's ready instances whose hang timeout is on
    (instance id -> endpoint)."""
    return {
        m.instance.instance_id: m.instance.endpoint
        for m in cluster.own_view(state, node).models.values()
        if m.instance is not None
        and m.instance.status is InstanceStatus.READY
        and m.instance.endpoint
        and bound_for(m, bound) > 0
    }
