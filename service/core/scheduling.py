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
from dataclasses import dataclass, field
from datetime import datetime

import service.core.placement as placement
from service.core.device_placement import Footprint
from service.core.draft_source import draft_model, draft_need, needs_draft
from service.core.errors import CommandRejected
from service.core.holders import held_live
from service.core.placement import NodeBudget, Verdict
from service.core.state import DownloadJob, Instance, InstanceStatus, JobStatus, ModelState, ModelStatus, RouterState


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
    processes not reaped yet, and the limit (0 = unlimited). ``nodes``: each node's
    budget (slots and memory, :mod:`service.core.placement`); empty: one node with
    ``models_max`` slots and no memory limit."""

    models_max: int
    busy: Mapping[str, int]
    exiting: int = 0
    nodes: tuple[NodeBudget, ...] = ()

    def budgets(self) -> tuple[NodeBudget, ...]:
        return self.nodes or (NodeBudget(None, self.models_max),)


@dataclass(frozen=True, slots=True)
class SlotPlan:
    """Demands to start now (``where``: the node of each, by model), and models to evict
    (``ready -> stopping``) for the others."""

    start: tuple[Demand, ...] = ()
    evict: tuple[str, ...] = ()
    where: Mapping[str, str | None] = field(default_factory=dict)


def running_count(state: RouterState) -> int:
    """Instances that hold a slot in the log: starting, loading, ready or stopping."""
    return sum(1 for m in state.models.values() if m.instance is not None)


def loadable(model: ModelState | None) -> bool:
    """Files present, no download running, not loaded yet."""
    return model is not None and model.available and bool(model.path) and model.active_job is None


def needs_files(model: ModelState | None, state: RouterState | None = None) -> bool:
    """A model with a Hub source (a preset's ``hf-repo``, the ``-hf`` model) whose files are not on
    disk yet (given the ``state``, in a cluster: on no node that is up), or a pulled model whose files
    only lost or departed nodes hold (:func:`pulled_from`): its next load or request downloads them
    first; so is one whose draft model comes from the Hub (``hf-repo-draft``) and is not here yet."""
    if model is None:
        return False
    return needs_own_files(model, state) or (state is not None and needs_draft(state, model))


def needs_own_files(model: ModelState, state: RouterState | None = None) -> bool:
    """:func:`needs_files` for the model's own files, not its draft's (``hf-repo-draft``)."""
    gone = state is not None and not held_live(state, model)
    if model.config.hf_repo is None:
        return model.available and gone and pulled_from(model) is not None
    return not model.available or gone


def pulled_from(model: ModelState) -> DownloadJob | None:
    """The download job that brought ``model``'s files (the last one that finished): a pulled model
    is fetched again from it, at its commit, on another node."""
    finished = [job for job in model.jobs.values() if job.status is JobStatus.FINISHED and job.repo]
    return finished[-1] if finished else None


def require_loadable(state: RouterState, name: str) -> ModelState:
    """The model behind ``name`` (or alias), refusing what cannot be loaded."""
    model = state.resolve(name)
    if model is None or not model.listed:
        raise CommandRejected("model_not_found", f"model {name!r} is not found", model=name)
    if model.status is ModelStatus.DOWNLOADING:
        raise CommandRejected("conflict", f"model {model.name!r} is still downloading", model=model.name)
    if not model.available or not model.path:
        raise CommandRejected("model_not_found", f"model {model.name!r} has no files to load", model=model.name)
    if not held_live(state, model):
        gone = ", ".join(repr(n) for n in sorted(model.holders))
        again = (
            "the next request downloads them again"
            if needs_files(model, state)
            else "and there is no Hub source to download them from again: start that node again, or pull the model"
        )
        raise CommandRejected(
            "model_failed",
            f"model {model.name!r} has its files only on node {gone}, which is gone (lost or left); {again}",
            model=model.name,
            reason="files_unavailable",
        )
    return model


def plan_slots(state: RouterState, demands: Sequence[Demand], facts: SlotFacts) -> SlotPlan:
    """Start what fits, evict for what does not, oldest demand first (see module doc); each
    demand goes where :mod:`service.core.placement` puts it. A demand no node can ever take
    (its memory need) is skipped: its requesters are refused, it blocks nobody."""
    budgets = facts.budgets()
    tally = placement.loads(state, budgets, facts.exiting)
    protected = {d.model for d in demands} | {name for name, n in facts.busy.items() if n > 0}
    start: list[Demand] = []
    evict: list[str] = []
    where: dict[str, str | None] = {}
    for demand in demands:
        model = state.models.get(demand.model)
        if not demand.start or demand.started is not None or model is None or model.instance is not None:
            continue
        if not loadable(model):
            continue
        shield = frozenset(protected | set(evict))
        choice = _best_node(state, model, budgets, tally, facts.busy, shield)
        if choice is None:
            continue
        if choice.verdict is Verdict.BLOCKED:
            break  # FIFO: nobody behind may overtake
        load = tally[choice.node]
        need = choice.footprint or Footprint(placement.model_need(model))
        if choice.verdict is Verdict.FITS:
            start.append(demand)
            where[demand.model] = choice.node
            load.take(model.name, need)
            continue
        for victim in choice.evict:
            evict.append(victim)
            load.freeing(load.uses.get(victim) or Footprint(placement.model_need(state.models[victim])))
        # What is being freed (already, or by these evictions) is this demand's: not the next one's.
        load.freeing_slots = max(0, load.freeing_slots - 1)
        load.freeing_memory = max(0, load.freeing_memory - need.host)
        for name, size in need.devices.items():
            load.freeing_devices[name] = max(0, load.freeing_devices.get(name, 0) - size)
    return SlotPlan(start=tuple(start), evict=tuple(evict), where=where)


def _best_node(
    state: RouterState,
    model: ModelState,
    budgets: Sequence[NodeBudget],
    tally: Mapping[str | None, placement.NodeLoad],
    busy: Mapping[str, int],
    protected: frozenset[str],
) -> placement.Choice | None:
    """The best node's verdict for ``model`` among those holding its files and its Hub draft's, its
    draft's memory counted with it (:mod:`service.core.draft_source`)."""
    nodes = placement.candidates(model, budgets, draft_model(state, model))
    draft = draft_need(state, model)
    return placement.best([placement.judge(model, b, tally[b.name], busy, protected, draft=draft) for b in nodes])


def download_node(state: RouterState, name: str, size: int, facts: SlotFacts) -> str | None:
    """The node that downloads ``name``'s files (``size`` bytes) for a load or a request: the one that
    will serve it (:func:`placement.download_site`); None: the deciding node."""
    model = state.resolve(name)
    if model is None:
        return None
    budgets = facts.budgets()
    return placement.download_site(model, budgets, placement.loads(state, budgets, facts.exiting), facts.busy, size)


def can_ever_start(state: RouterState, model: str, facts: SlotFacts) -> bool:
    """Whether a load of ``model`` could get a slot without waiting for a request
    to finish: a free slot, one being freed, or an idle model to evict, on some node."""
    found = state.models.get(model)
    if found is None:
        return True
    budgets = facts.budgets()
    tally = placement.loads(state, budgets, facts.exiting)
    busy = frozenset(name for name, n in facts.busy.items() if n > 0) | {model}
    choice = _best_node(state, found, budgets, tally, facts.busy, busy)
    return choice is not None and choice.verdict is not Verdict.BLOCKED


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
