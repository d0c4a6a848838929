"""The instance supervisor's decisions, as values: load, acquire, unload, tick, exit, shut down.

Each function takes the fold (:class:`RouterState`), the demand queue
(:class:`~service.core.demand_queue.Queue`) and the facts only the
supervisor observes (:class:`Facts`: time, requests in flight, processes not
reaped), and returns a :class:`~service.core.decision.Decision`: the events to
append, the effects to perform after them (spawn, stop, kill, arm a restart,
edit the queue) and the caller's answer. Refusals raise ``CommandRejected``
before anything is decided. ``service/supervision/instances.py`` only feeds
facts in and hands the decisions to the interpreter.

Pure module: stdlib only; time, ids and ports are passed in (:mod:`service.core.instance_facts`),
and what is asked of the worker processes is :mod:`service.core.instance_effects`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import service.core.cluster as cluster
import service.core.events as ev
import service.core.instance_lifecycle as lifecycle
import service.core.scheduling as scheduling
from service.core.decision import Append, Decision, Effect, about, nothing
from service.core.demand_queue import Demanded, Dropped, Queue, QueueEdit, RestartArmed, Started, Waiting, edit
from service.core.draft_source import draft_need, draft_params
from service.core.errors import CommandRejected
from service.core.instance_effects import FetchFiles as FetchFiles
from service.core.instance_effects import Kill as Kill
from service.core.instance_effects import Sleep as Sleep
from service.core.instance_effects import Spawn as Spawn
from service.core.instance_effects import Stop as Stop
from service.core.instance_exits import ArmRestart as ArmRestart
from service.core.instance_exits import Warn as Warn
from service.core.instance_exits import decide_closed as decide_closed
from service.core.instance_exits import decide_exit as decide_exit
from service.core.instance_exits import decide_spawn_failed as decide_spawn_failed
from service.core.instance_exits import restart_timer as restart_timer
from service.core.instance_facts import Drawn as Drawn
from service.core.instance_facts import Facts as Facts
from service.core.instance_facts import Limits as Limits
from service.core.instance_facts import slot_facts as slot_facts
from service.core.placement import insufficient_memory, loads
from service.core.state import FailureKind, Instance, InstanceStatus, ModelState, ModelStatus, RouterState

# --- the answers ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Acquired:
    """A request may go to ``endpoint``: the model is ready, and counted busy by the caller at once."""

    model: str
    endpoint: str
    node: str | None = None  # another node's service (forwarded there), None: this node's worker


@dataclass(frozen=True, slots=True)
class Wait:
    """The request waits for ``model`` (queued or loading) until the next change."""

    model: str


def _refuse_unfit(state: RouterState, model: ModelState, facts: Facts) -> None:
    """507 ``insufficient_memory`` at once for a model no node could ever hold."""
    slots = slot_facts(state, facts)
    budgets = slots.budgets()
    insufficient_memory(model, budgets, loads(state, budgets, slots.exiting), draft_need(state, model))


def _edits(queue: Queue, edits: tuple[QueueEdit, ...]) -> Queue:
    for change in edits:
        queue = edit(queue, change)
    return queue


def _refuse_held(queue: Queue, model: str) -> None:
    if model in queue.holds:
        raise CommandRejected("conflict", f"model {model!r} is being removed", model=model)


def _found(state: RouterState, name: str) -> ModelState:
    model = state.resolve(name)
    if model is None or not model.listed:
        raise CommandRejected("model_not_found", f"model {name!r} is not found", model=name)
    return model


# --- planning ---------------------------------------------------------------------------


def settled(state: RouterState, queue: Queue, facts: Facts) -> tuple[QueueEdit | Warn, ...]:
    """Entries that need nothing more: started and now ready or ended with nobody waiting, or
    explicit ones that waited longer than ``queue_timeout`` (abandoned, with a warning)."""
    out: list[QueueEdit | Warn] = []
    for demand in queue.demands:
        if demand.waiters:
            continue
        model = state.models.get(demand.model)
        inst = model.instance if model is not None else None
        done = demand.started is not None and (
            inst is None or inst.instance_id != demand.started or inst.status is InstanceStatus.READY
        )
        stale = demand.started is None and facts.mono - demand.created > facts.limits.queue_timeout
        if done or stale or model is None:
            out.append(Dropped(demand.model))
            if stale:
                waited = round(facts.mono - demand.created, 1)
                out.append(Warn("load_abandoned", {"model": demand.model, "waited_s": waited}))
    return tuple(out)


def decide_plan(state: RouterState, queue: Queue, facts: Facts, fresh: Drawn) -> Decision[None]:
    """Who gets a model slot now (``scheduling.plan_slots``): evictions to stop, starts to spawn, each
    start with the next id (and port, on this node) ``fresh`` holds."""
    dropped = settled(state, queue, facts)
    queue = _edits(queue, tuple(e for e in dropped if isinstance(e, QueueEdit)))
    plan = scheduling.plan_slots(state, queue.pending(), slot_facts(state, facts))
    events: list[Append] = []
    effects: list[Effect] = list(dropped)
    for victim in plan.evict:
        inst = state.models[victim].instance
        assert inst is not None  # placement evicts ready instances only
        events += about(victim, lifecycle.stop(inst, "evicted"))
        effects += [Stop(inst.instance_id)] if facts.mine(inst) else []  # else its own node's supervisor stops it
    ids, ports = iter(fresh.ids), iter(fresh.ports)
    for wanted in plan.start:
        node = plan.where.get(wanted.model)
        here = node is None or node == facts.node
        instance_id, port = next(ids, None), next(ports, None) if here else 0
        if instance_id is None or port is None:
            break  # drawn for an older state: the rest start on the next pass
        model = state.models[wanted.model]
        params = draft_params(cluster.own_view(state, node), model)  # -hfd: its draft's file there as -md
        request = lifecycle.request(instance_id, port, model, wanted.reason, node, params)
        events.append(Append(request, wanted.model))
        effects += [Started(wanted.model, request.instance_id)] + ([Spawn(wanted.model, request)] if here else [])
    return Decision(None, tuple(events), tuple(effects))


def to_draw(made: Decision[Any]) -> tuple[int, int]:  # Any: a decision's answer is not looked at
    """How many instance ids and ports ``made`` (taken over :meth:`Drawn.enough_for`'s stand-ins) used:
    the supervisor draws as many before taking it for real."""
    ids = sum(1 for a in made.events if isinstance(a.event, ev.InstanceRequested))
    return ids, sum(1 for e in made.effects if isinstance(e, Spawn))


def decide_load(state: RouterState, queue: Queue, name: str, reason: str, facts: Facts, fresh: Drawn) -> Decision[str]:
    """``POST /models/load``: start loading unless it runs; answers the model's name at once
    (readiness arrives as events). When no slot can ever be freed (every loaded model busy or
    loading) the answer is 503 ``capacity``."""
    model = scheduling.require_loadable(state, name)
    _refuse_held(queue, model.name)
    if model.instance is not None:
        return nothing(model.name)
    _refuse_unfit(state, model, facts)
    if queue.get(model.name) is None and not scheduling.can_ever_start(state, model.name, slot_facts(state, facts)):
        raise CommandRejected(
            "capacity",
            f"model limit reached ({facts.limits.models_max}) and every loaded model is busy "
            "or loading; try again later",
        )
    demanded = Demanded(model.name, reason, facts.mono, explicit=True)
    planned = decide_plan(state, edit(queue, demanded), facts, fresh)
    return Decision(model.name, planned.events, (demanded, *planned.effects))


def decide_fetch(state: RouterState, name: str, then_load: str | None) -> Decision[str]:
    """A model whose files come from the Hub on first use is downloaded before it loads
    (llama.cpp's router downloads it silently inside the child: #24822, #19351); so is one whose
    files only lost or departed nodes hold (:func:`scheduling.needs_files`)."""
    model = _found(state, name)
    if not scheduling.needs_files(model, state):
        return nothing(model.name)
    return Decision(model.name, effects=(FetchFiles(model.name, then_load),))


# --- requests ------------------------------------------------------------------------------


def _raise_if_failed(model: ModelState, mine: Waiting | None) -> None:
    """A failed load is not retried on every request (a corrupt file stays corrupt); a crash is,
    once: the next request autoloads, as in llama.cpp, unless the model crashed on its first
    request twice in a row. A request whose own load failed is told why."""
    ours = mine is not None and mine.started is not None
    refusal = lifecycle.crash_loop(model) if not ours else None
    if refusal is not None:
        raise refusal
    crashed = lifecycle.crash_rejection(model) if ours else None
    if crashed is not None:
        raise crashed
    error = model.last_error
    if model.failed and error is not None and (error.kind is FailureKind.LOAD or ours):
        raise CommandRejected(
            "model_failed",
            f"model {model.name!r} failed to load: {error.reason}: {error.message}",
            model=model.name,
            reason=error.reason,
        )
    if ours:
        message = f"model {model.name!r} was unloaded before it was ready"
        raise CommandRejected("model_failed", message, model=model.name)


def decide_acquire(
    state: RouterState, queue: Queue, name: str, *, autoload: bool, mine: Waiting | None, facts: Facts, deadline: float
) -> Decision[Acquired | Wait]:
    """One look at a request for ``name``: go to the ready instance, or join (or keep) its model's
    entry and wait; or a refusal (unknown, held, failed, autoload off, queue full, timed out)."""
    model = _found(state, name)
    _refuse_held(queue, model.name)
    inst = model.instance
    if inst is not None and inst.status is InstanceStatus.READY:
        return nothing(Acquired(model.name, *cluster.endpoint_of(state, model, facts.node)))
    asleep = inst is None and model.status is ModelStatus.SLEEPING
    if inst is None:
        _raise_if_failed(model, mine)
        if not autoload and not asleep:  # a sleeping model wakes whatever autoload says, as in llama-server
            raise CommandRejected(
                "model_not_loaded",
                f"model {model.name!r} is not loaded, and autoload is off: load it with POST /models/load, "
                "or pass ?autoload=true",
                model=model.name,
            )
        scheduling.require_loadable(state, model.name)
        _refuse_unfit(state, model, facts)
    effects: tuple[Effect, ...] = ()
    if mine is None:
        limit = facts.limits.max_queued_requests
        if limit and queue.waiters >= limit:
            raise CommandRejected(
                "capacity", f"{queue.waiters} requests already wait for a model (max_queued_requests={limit})"
            )
        reason = lifecycle.WAKE if asleep else "autoload"
        effects = (Demanded(model.name, reason, facts.mono, waiter=True, autoload=autoload or asleep),)
    if deadline - facts.mono <= 0 and (inst is None or inst.status is InstanceStatus.STOPPING):
        # Waiting for a slot is bounded here; a load in progress by its load deadline.
        raise CommandRejected(
            "capacity",
            f"no slot for model {model.name!r} within {facts.limits.queue_timeout:g} s "
            f"(models_max={facts.limits.models_max}, queue={queue.waiters})",
        )
    return Decision(Wait(model.name), effects=effects)


# --- unloads ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class UnloadTarget:
    """What ``POST /models/unload`` stops: a download in progress (llama.cpp cancels it), else the instance."""

    model: str
    cancel_job: str | None


def unload_target(state: RouterState, name: str) -> UnloadTarget:
    """For a model that is downloading, unloading cancels the download (llama.cpp's behaviour)."""
    model = _found(state, name)
    return UnloadTarget(model.name, model.active_job)


def decide_unload(
    state: RouterState, queue: Queue, name: str, reason: str, node: str | None = None
) -> Decision[Instance | None]:
    """``-> stopping`` (the caller then waits for the worker to be gone); answers the instance. In a
    cluster any node may decide it; the node that runs the worker stops it. A sleeping model has no
    worker left: its sleep ends (``sleep_ended``), answering None."""
    model = _found(state, name)
    inst = model.instance
    if inst is None and model.status is ModelStatus.SLEEPING:
        return Decision(None, (Append(ev.SleepEnded(reason="unload"), model.name),))  # llama.cpp: sleeping runs
    if inst is None:
        raise CommandRejected("not_running", f"model {model.name!r} is not running", model=model.name)
    entry = queue.get(model.name)
    drop: tuple[Effect, ...] = (Dropped(model.name),) if entry is not None and entry.waiters == 0 else ()
    stop = (Stop(inst.instance_id),) if inst.node is None or inst.node == node else ()  # else its node stops it
    return Decision(inst, about(model.name, lifecycle.stop(inst, reason)), (*drop, *stop))


def decide_shutdown(state: RouterState, node: str | None = None) -> Decision[tuple[str, ...]]:
    """Every live instance of this node ``-> stopping`` (reason ``shutdown``); answers their ids (to wait for)."""
    live = [(m.name, m.instance) for m in cluster.own_view(state, node).models.values() if m.instance is not None]
    events = tuple(a for name, inst in live for a in about(name, lifecycle.stop(inst, "shutdown")))
    return Decision(tuple(inst.instance_id for _, inst in live), events, tuple(Stop(i.instance_id) for _, i in live))


# --- timers ------------------------------------------------------------------------------------


def decide_timers(state: RouterState, queue: Queue, facts: Facts) -> Decision[None]:
    """Load deadlines (``-> failed(load_timeout)``, then a kill), idle TTLs (``-> stopping``), sleeps
    (``-> stopping``, reason ``sleep``) and restart timers that are due (an explicit entry for the model)."""
    events: list[Append] = []
    effects: list[Effect] = []
    state = cluster.own_view(state, facts.node)  # each node times its own instances
    for model in state.models.values():
        inst = model.instance
        if inst is None:
            continue
        failed = lifecycle.on_load_deadline(state, model.name, inst.instance_id, facts.now, facts.limits.load_timeout)
        if failed:
            events += about(model.name, failed)
            effects.append(Kill(inst.instance_id))
    expired = scheduling.idle_expired(state, facts.busy, facts.now)
    for model in expired:
        assert model.instance is not None
        events += about(model.name, lifecycle.stop(model.instance, scheduling.idle_reason(model.instance)))
        effects.append(Stop(model.instance.instance_id))
    awaited = frozenset(d.model for d in queue.demands) | {m.name for m in expired}
    for model in scheduling.sleep_due(state, facts.busy, facts.now, awaited):
        assert model.instance is not None
        events += about(model.name, lifecycle.stop(model.instance, lifecycle.SLEEP))
        effects.append(Sleep(model.instance.instance_id, model.name, model.instance.endpoint))
    for name, due in queue.restart_due.items():
        if facts.mono < due:
            continue
        effects.append(RestartArmed(name, None))
        found = state.models.get(name)
        if found is not None and scheduling.loadable(found) and found.instance is None:
            effects.append(Demanded(name, "restart", facts.mono, explicit=True))
    return Decision(None, tuple(events), tuple(effects))


def timers_running(state: RouterState, queue: Queue, facts: Facts) -> bool:
    """Whether some timer may fire without a change (an instance's load deadline or idle TTL, a
    queued entry's timeout, a restart); if not, an idle supervisor sleeps until something changes."""
    live = any(m.instance is not None for m in state.models.values())
    return live or bool(queue.demands) or bool(queue.restart_due) or bool(facts.processes)
