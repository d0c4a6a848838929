"""What the instance decisions are told besides the fold: the facts only the supervisor observes.

Time, requests in flight, worker processes not reaped yet, this node's memory
(:class:`Facts`), and the instance ids and ports drawn for the instances a plan
may start (:class:`Drawn`): the supervisor draws them before the decision, so no
decision makes an id or binds a socket itself, and one taken again over a newer
state uses the same ones.

Pure module: stdlib only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

import service.core.cluster as cluster
import service.core.scheduling as scheduling
from service.core.demand_queue import Queue
from service.core.device_placement import node_gpus
from service.core.placement import NodeBudget
from service.core.state import Instance, RouterState


@dataclass(frozen=True, slots=True)
class Limits:
    """The settings the decisions read (from ``Settings``)."""

    models_max: int
    queue_timeout: float
    max_queued_requests: int
    load_timeout: float


@dataclass(frozen=True, slots=True)
class Facts:
    """What only the supervisor observes, at the moment of a decision."""

    limits: Limits
    now: datetime  # wall clock: compared with recorded_at
    mono: float  # monotonic seconds: queue timeouts and restart timers
    busy: Mapping[str, int] = field(default_factory=dict)  # requests in flight per model
    processes: frozenset[str] = frozenset()  # instance ids whose worker process is not reaped yet
    node: str | None = None  # the deciding service's node (None: a service without --node)
    memory: int | None = None  # bytes this node's models may use (RAM less the margin); None: not limited

    def mine(self, inst: Instance | None) -> bool:
        """Whether ``inst`` runs on this node (its supervisor acts on it)."""
        return inst is not None and (inst.node is None or inst.node == self.node)


@dataclass(frozen=True, slots=True)
class Drawn:
    """Instance ids and ports drawn before a decision, taken in order by the instances it starts: an
    id each, a port each that starts on this node (another node picks its own). A plan that would
    start more than were drawn (taken again over a newer state) starts those the draw covers; the
    rest start on the next pass."""

    ids: tuple[str, ...] = ()
    ports: tuple[int, ...] = ()

    @classmethod
    def enough_for(cls, queue: Queue) -> Drawn:
        """Stand-ins for as many starts as ``queue`` (and one more demand) could make: a decision taken
        over them tells how many real ones to draw (:func:`service.core.instance_decisions.to_draw`)."""
        n = len(queue.demands) + 1
        return cls(("",) * n, (0,) * n)


def slot_facts(state: RouterState, facts: Facts) -> scheduling.SlotFacts:
    """What placement needs beyond the fold: requests in flight, workers exiting, every node's budget."""
    live = {m.instance.instance_id for m in state.models.values() if m.instance is not None}
    exiting = sum(1 for iid in facts.processes if iid not in live)
    local = NodeBudget(facts.node, facts.limits.models_max, facts.memory, devices=node_gpus(state, facts.node))
    return scheduling.SlotFacts(
        models_max=facts.limits.models_max,
        busy=dict(facts.busy),
        exiting=exiting,
        nodes=cluster.budgets(state, facts.node, local),
    )
