"""Who gets a model slot: pure decisions over the fold plus in-memory facts.

The fold knows which instances exist; only the supervisor knows which
requests are in flight (``busy``), which requests or loads wait for a model
(``demands``, FIFO) and which worker processes have ended but are not reaped
yet (``exiting``). :func:`plan_slots` combines them, in the spirit of
llama.cpp's ``server_lru_sched``, with its races fixed:

* a slot is taken from ``instance_requested`` until the worker process is
  reaped, so ``models_max`` holds for live processes, not only for the log;
* demands are served in arrival order, and one demand per model: N requests
  waiting for one missing model cost one eviction, not N;
* only *idle ready* models are evicted: never one that is loading, stopping,
  serving a request, or awaited by a demand (so a model cannot be evicted
  before its own waiting request was proxied, llama.cpp #28698);
* a slot that is already being freed (a stopping or exiting worker) is
  claimed by the oldest demand before anything else is evicted;
* when nothing can be freed, later demands do not overtake earlier ones.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from service.core.errors import CommandRejected
from service.core.state import Instance, InstanceStatus, ModelState, ModelStatus, RouterState

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class Demand:
    """Requests or a load waiting for ``model``; ``started`` is the instance id
    started for it (then it only waits for readiness). A demand that may not
    ``start`` anything (requests with autoload off waiting for a model that is
    loading) still protects that model from eviction."""

    model: str
    reason: str = "autoload"
    started: str | None = None
    start: bool = True


@dataclass(frozen=True, slots=True)
class SlotFacts:
    """What the fold does not hold: requests in flight per model, worker
    processes not reaped yet, and the limit (0 = unlimited)."""

    models_max: int
    busy: Mapping[str, int]
    exiting: int = 0


@dataclass(frozen=True, slots=True)
class SlotPlan:
    """Demands to start now, and models to evict (``ready -> stopping``) for the others."""

    start: tuple[Demand, ...] = ()
    evict: tuple[str, ...] = ()


def running_count(state: RouterState) -> int:
    """Instances that hold a slot in the log: starting, loading, ready or stopping."""
    return sum(1 for m in state.models.values() if m.instance is not None)


def loadable(model: ModelState | None) -> bool:
    """Files present, no download running, not loaded yet."""
    return model is not None and model.available and bool(model.path) and model.active_job is None


def needs_files(model: ModelState | None) -> bool:
    """A model with a Hub source (a preset's ``hf-repo``, the ``-hf`` model) whose files are not on
    disk yet: its first load or request downloads them first."""
    return model is not None and model.config.hf_repo is not None and not model.available


def require_loadable(state: RouterState, name: str) -> ModelState:
    """The model behind ``name`` (or alias), refusing what cannot be loaded."""
    model = state.resolve(name)
    if model is None or not model.listed:
        raise CommandRejected("model_not_found", f"model {name!r} is not found", model=name)
    if model.status is ModelStatus.DOWNLOADING:
        raise CommandRejected("conflict", f"model {model.name!r} is still downloading", model=model.name)
    if not model.available or not model.path:
        raise CommandRejected("model_not_found", f"model {model.name!r} has no files to load", model=model.name)
    return model


def choose_victim(state: RouterState, busy: Mapping[str, int], protected: frozenset[str]) -> ModelState | None:
    """The least recently used *idle ready* model outside ``protected``, or None."""
    idle = [
        m
        for m in state.models.values()
        if m.instance is not None
        and m.instance.status is InstanceStatus.READY
        and busy.get(m.name, 0) == 0
        and m.name not in protected
    ]
    if not idle:
        return None
    return min(idle, key=lambda m: (m.last_used or _EPOCH, m.name))


def plan_slots(state: RouterState, demands: Sequence[Demand], facts: SlotFacts) -> SlotPlan:
    """Start what fits, evict for what does not, oldest demand first (see module doc)."""
    limit = facts.models_max
    used = running_count(state) + facts.exiting
    freeing = facts.exiting + sum(
        1 for m in state.models.values() if m.instance is not None and m.instance.status is InstanceStatus.STOPPING
    )
    protected = {d.model for d in demands} | {name for name, n in facts.busy.items() if n > 0}
    start: list[Demand] = []
    evict: list[str] = []
    for demand in demands:
        model = state.models.get(demand.model)
        if not demand.start or demand.started is not None or model is None or model.instance is not None:
            continue
        if not loadable(model):
            continue
        if limit == 0 or used < limit:
            start.append(demand)
            used += 1
        elif freeing > 0:
            freeing -= 1  # a slot is on its way: it is this demand's
        else:
            victim = choose_victim(state, facts.busy, frozenset(protected | set(evict)))
            if victim is None:
                break  # FIFO: nobody behind may overtake
            evict.append(victim.name)
    return SlotPlan(start=tuple(start), evict=tuple(evict))


def can_ever_start(state: RouterState, model: str, facts: SlotFacts) -> bool:
    """Whether a load of ``model`` could get a slot without waiting for a request
    to finish: a free slot, one being freed, or an idle model to evict."""
    if facts.models_max == 0:
        return True
    plan = plan_slots(state, [Demand(model, "load")], facts)
    if plan.start or plan.evict:
        return True
    return (
        any(m.instance is not None and m.instance.status is InstanceStatus.STOPPING for m in state.models.values())
        or facts.exiting > 0
    )


def idle_limit(model: ModelState) -> float | None:
    """Seconds a ready model may stay idle before it is unloaded; None: forever. An Ollama request's
    ``keep_alive`` (kept on the instance) wins over the model's ``ttl_seconds``; there ``0`` means
    "unload once idle" and a negative value "never", while a ``ttl`` of 0 or less means no TTL."""
    inst = model.instance
    if inst is not None and inst.keep_alive is not None:
        return None if inst.keep_alive < 0 else inst.keep_alive
    ttl = model.config.ttl_seconds
    return None if ttl is None or ttl <= 0 else ttl


def idle_reason(inst: Instance) -> str:
    """The stop reason recorded for an idle unload: ``keep_alive`` when an Ollama request set the limit."""
    return "idle" if inst.keep_alive is None else "keep_alive"


def idle_expired(state: RouterState, busy: Mapping[str, int], now: datetime) -> list[ModelState]:
    """Ready, idle models whose idle limit (:func:`idle_limit`) has passed since last use."""
    expired = []
    for m in state.models.values():
        ttl = idle_limit(m)
        if ttl is None or m.instance is None or m.instance.status is not InstanceStatus.READY:
            continue
        last = m.last_used or m.instance.ready_at
        if busy.get(m.name, 0) == 0 and last is not None and (now - last).total_seconds() >= ttl:
            expired.append(m)
    return expired


def sleep_due(state: RouterState, busy: Mapping[str, int], now: datetime, awaited: frozenset[str]) -> list[ModelState]:
    """Ready models idle for their ``sleep_idle_seconds`` (llama-server's ``--sleep-idle-seconds``):
    nothing in flight, no demand waiting for them, no use since. Monitoring reads do not count as use."""
    due = []
    for m in state.models.values():
        after = m.config.sleep_idle_seconds
        if after is None or after <= 0 or m.instance is None or m.instance.status is not InstanceStatus.READY:
            continue
        last = m.last_used or m.instance.ready_at
        idle = busy.get(m.name, 0) == 0 and m.name not in awaited
        if idle and last is not None and (now - last).total_seconds() >= after:
            due.append(m)
    return due
