"""Where (and whether) a model runs: one pure decision for one node and for many.

Inputs, all from the fold or the deciding supervisor: each node's budget
(``models_max`` slots and the memory its models may use, from its
``node_joined``, or the local settings without a cluster), what runs where
(instances with their node, each costing its model's estimated need,
:mod:`service.core.memory`), who holds the model's files, LRU order
(``last_used``), pinned models (never evicted), requests in flight and
models awaited by demands (never evicted either).

For one model the rules are, node by node:

1. it **fits** when a slot is free and its need fits the free memory;
2. else it **waits** for what is already being freed (a stopping instance,
   an exiting worker), if that is enough;
3. else the least recently used idle, unpinned, ready models of that node
   are **evicted**, as few as it takes for both the slot and the memory;
4. it is **impossible** on that node when even evicting every unpinned
   model (busy ones included) would not free enough memory, or every slot
   is pinned;
5. otherwise it is **blocked** until a request ends.

Across nodes: a node that holds the model's files first, then fits over
waits over evictions (fewest first) over blocked, then the most free memory,
then the name. A model impossible on every node is refused at once
(``insufficient_memory``, 507) rather than loaded into an out-of-memory crash.
A model that no live node holds is downloaded where it will be served: the
node its load would pick by the same rules, judged by the size of its files,
among those whose disk has room for them (:func:`download_site`).

Pure module: stdlib only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import IntEnum

from service.core.errors import CommandRejected
from service.core.memory import need_bytes
from service.core.state import InstanceStatus, ModelState, RouterState

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class NodeBudget:
    """What one node offers: ``models_max`` slots (0 = unlimited) and ``memory`` bytes for its
    models (None = not limited). ``name`` None is the one node of a service without ``--node``."""

    name: str | None
    models_max: int
    memory: int | None = None
    local: bool = True  # the deciding service's own node: its busy counts and exiting workers are known
    room: int | None = None  # bytes a download may still write there (cluster.disk_room); None: not known


@dataclass(slots=True)
class NodeLoad:
    """A node's use while a plan is built (mutable tally, private to one plan)."""

    slots: int = 0
    memory: int = 0
    freeing_slots: int = 0
    freeing_memory: int = 0
    pinned_slots: int = 0
    pinned_memory: int = 0
    running: list[ModelState] = field(default_factory=list)


class Verdict(IntEnum):
    """One node's answer for one model, best first."""

    FITS = 0
    WAITS = 1  # for what is already being freed
    EVICTS = 2
    BLOCKED = 3
    IMPOSSIBLE = 4


@dataclass(frozen=True, slots=True)
class Choice:
    """A node's verdict: the victims to evict first (``EVICTS``), and what it would leave free."""

    node: str | None
    verdict: Verdict
    evict: tuple[str, ...] = ()
    holds: bool = True
    free_memory: int | None = None


def model_need(model: ModelState) -> int:
    """The estimated bytes ``model`` needs loaded (0 while not measured)."""
    return need_bytes(model.shape, model.config.params, model.config.args)


def node_of(model: ModelState) -> str | None:
    """The node whose instance of ``model`` runs (None: the one node of a service without ``--node``)."""
    return model.instance.node if model.instance is not None else None


def loads(state: RouterState, budgets: Sequence[NodeBudget], exiting: int = 0) -> dict[str | None, NodeLoad]:
    """Each node's use in the log; ``exiting``: the local node's workers not reaped yet."""
    tally: dict[str | None, NodeLoad] = {b.name: NodeLoad() for b in budgets}
    for model in state.models.values():
        load = tally.get(node_of(model)) if model.instance is not None else None
        if load is None or model.instance is None:
            continue
        need = model_need(model)
        load.slots += 1
        load.memory += need
        load.running.append(model)
        if model.instance.status is InstanceStatus.STOPPING:
            load.freeing_slots += 1
            load.freeing_memory += need
        elif model.config.pinned:
            load.pinned_slots += 1
            load.pinned_memory += need
    for budget in budgets:
        if budget.local:
            tally[budget.name].slots += exiting
            tally[budget.name].freeing_slots += exiting
    return tally


def holds(model: ModelState, node: str | None) -> bool:
    """Whether ``node`` has ``model``'s files (without nodes: whether the model has any)."""
    if node is None or not model.holders:
        return model.available and bool(model.path)
    return node in model.holders


def held_live(state: RouterState, model: ModelState) -> bool:
    """Whether ``model``'s files are on a node that is up (without nodes: whether it has any). A
    model that only lost or departed nodes hold is downloaded again to run; a holder not joined yet
    (a node's catalogue is recorded before its ``node_joined``) counts as up."""
    if not model.holders:
        return model.available
    return any((node := state.nodes.get(name)) is None or not node.gone for name in model.holders)


def _evictable(load: NodeLoad, busy: Mapping[str, int], protected: frozenset[str], local: bool) -> list[ModelState]:
    def idle(m: ModelState) -> bool:
        inst = m.instance
        if inst is None or inst.status is not InstanceStatus.READY or m.config.pinned or m.name in protected:
            return False
        if local:
            return busy.get(m.name, 0) == 0
        return inst.stats is None or (inst.stats.slots_busy == 0 and inst.stats.queue_depth == 0)

    return sorted((m for m in load.running if idle(m)), key=lambda m: (m.last_used or _EPOCH, m.name))


def judge(
    model: ModelState,
    budget: NodeBudget,
    load: NodeLoad,
    busy: Mapping[str, int],
    protected: frozenset[str],
    need: int | None = None,
) -> Choice:
    """Rules 1-5 of the module doc for ``model`` on one node; ``need`` overrides its measured need
    (a model not downloaded yet is judged by the size of its files)."""
    need = model_need(model) if need is None else need
    limit, memory = budget.models_max, budget.memory
    free = None if memory is None else memory - load.memory
    on = holds(model, budget.name)

    def fits(slots: int, used: int) -> bool:
        return (limit == 0 or slots < limit) and (memory is None or used + need <= memory)

    if fits(load.slots, load.memory):
        return Choice(budget.name, Verdict.FITS, holds=on, free_memory=free)
    if (memory is not None and need > memory - load.pinned_memory) or (limit and load.pinned_slots >= limit):
        return Choice(budget.name, Verdict.IMPOSSIBLE, holds=on, free_memory=free)
    slots, used = load.slots - load.freeing_slots, load.memory - load.freeing_memory
    slot_coming = limit == 0 or load.slots < limit or load.freeing_slots > 0  # a slot being freed is claimed
    if (load.freeing_slots or load.freeing_memory) and slot_coming and (memory is None or used + need <= memory):
        return Choice(budget.name, Verdict.WAITS, holds=on, free_memory=free)
    victims: list[str] = []
    for victim in _evictable(load, busy, protected, budget.local):
        victims.append(victim.name)
        slots, used = slots - 1, used - model_need(victim)
        if fits(slots, used):
            return Choice(budget.name, Verdict.EVICTS, tuple(victims), holds=on, free_memory=free)
    return Choice(budget.name, Verdict.BLOCKED, holds=on, free_memory=free)


def best(choices: Sequence[Choice]) -> Choice | None:
    """The node to use among ``choices`` (see the module doc), or None when every one is impossible."""
    usable = [c for c in choices if c.verdict is not Verdict.IMPOSSIBLE]
    if not usable:
        return None
    return min(usable, key=lambda c: (not c.holds, c.verdict, len(c.evict), -(c.free_memory or 0), c.node or ""))


def candidates(model: ModelState, budgets: Sequence[NodeBudget]) -> list[NodeBudget]:
    """The nodes that may run ``model``: those holding its files (a single node: itself)."""
    return [b for b in budgets if holds(model, b.name)]


def download_site(
    model: ModelState,
    budgets: Sequence[NodeBudget],
    tally: Mapping[str | None, NodeLoad],
    busy: Mapping[str, int],
    size: int,
) -> str | None:
    """Where ``model``'s files are downloaded when no live node holds them: on the node that will
    serve it, chosen as its load would be (fits over waits over evictions, then the most free
    memory, then the name), its need taken as at least the ``size`` of its files (its weights, before
    the header is measured), among the nodes whose disk has room for them. None: the deciding node
    (alone, or nowhere fits even after evictions; its load is then refused as such a load is)."""
    if any(holds(model, b.name) for b in budgets if b.name is not None) or len(budgets) < 2:
        return None
    need = max(model_need(model), size)
    roomy = [b for b in budgets if b.room is None or b.room >= size]
    choice = best([judge(model, b, tally[b.name], busy, frozenset(), need) for b in roomy])
    return None if choice is None else choice.node


def insufficient_memory(model: ModelState, budgets: Sequence[NodeBudget], tally: Mapping[str | None, NodeLoad]) -> None:
    """Refuse at once (507) when no node could ever take ``model``, naming the need and the free memory."""
    nodes = candidates(model, budgets)
    if not nodes:
        return
    need = model_need(model)
    if need == 0:
        return
    fit = [b for b in nodes if b.memory is None or need <= b.memory - tally[b.name].pinned_memory]
    if fit:
        return
    most = max(b.memory or 0 for b in nodes)
    free = max((b.memory or 0) - tally[b.name].memory for b in nodes)
    where = "" if nodes[0].name is None else f" on any node holding it ({', '.join(str(b.name) for b in nodes)})"
    raise CommandRejected(
        "insufficient_memory",
        f"model {model.name!r} needs {need} bytes{where}, but at most {most} bytes are available to models "
        f"and {max(free, 0)} bytes are free; pinned models stay",
        model=model.name,
        need_bytes=need,
        memory_bytes=most,
        free_bytes=max(free, 0),
    )
