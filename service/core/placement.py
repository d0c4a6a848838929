"""Where (and whether) a model runs: one pure decision for one node and for many.

Inputs, all from the fold or the deciding supervisor: each node's budget
(``models_max`` slots and the memory its models may use, from its
``node_joined``, or the local settings without a cluster), what runs where
(instances with their node, each costing its model's estimated need,
:mod:`service.core.memory`), who holds the model's files, LRU order
(``last_used``), pinned models (never evicted), requests in flight and
models awaited by demands (never evicted either).

For one model the rules are, node by node:

1. it **fits** when a slot is free and its need fits the free memory, and, on a node with GPUs,
   its part on each GPU fits that GPU's free memory (:mod:`service.core.device_placement`);
2. else it **waits** for what is already being freed (a stopping instance,
   an exiting worker), if that is enough;
3. else the least recently used idle, unpinned, ready models of that node
   are **evicted**, as few as it takes for the slot, the memory and each GPU:
   those on a GPU the model does not fit go first (Ollama's rule: evict when
   a load would not fit in free VRAM);
4. it is **impossible** on that node when even evicting every unpinned
   model (busy ones included) would not free enough memory, or every slot
   is pinned;
5. otherwise it is **blocked** until a request ends.

When no eviction makes the full offload fit and ``--fit`` may lower the layers
(``--fit on``, ``-ngl auto``), the model is judged again with the layers that fit
the GPUs as they are (the rest on the host), as llama-server would load it; with
an explicit ``-ngl`` it is impossible where a GPU could never hold it, and the
507 names the GPU and its figures.

Across nodes: a node that holds the model's files first, then fits over
waits over evictions (fewest first) over blocked, then the most free memory,
then the name. A model impossible on every node is refused at once
(``insufficient_memory``, 507) rather than loaded into an out-of-memory crash.
A model that no live node holds is downloaded where it will be served: the
node its load would pick by the same rules, judged by the size of its files,
among those whose disk has room for them (:func:`download_site`).

Pure module: stdlib only. :func:`~service.core.holders.holds` and ``held_live`` live in
:mod:`service.core.holders`: the draft lookup needs them, and placement needs the draft's memory.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from enum import IntEnum

from service.core.device_placement import DeviceShort, Footprint, footprint, running_footprint, squeezable
from service.core.devices import Device
from service.core.draft_source import draft_need
from service.core.errors import CommandRejected
from service.core.holders import holds
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
    devices: tuple[Device, ...] = ()  # its GPUs, free memory as measured (device_placement.node_gpus)


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
    devices: dict[str, int] = field(default_factory=dict)  # bytes used on each GPU
    freeing_devices: dict[str, int] = field(default_factory=dict)
    pinned_devices: dict[str, int] = field(default_factory=dict)
    uses: dict[str, Footprint] = field(default_factory=dict)  # each running model's, by name

    def take(self, name: str, foot: Footprint) -> None:
        """Count ``foot`` (a model placed, or running) as used."""
        self.uses[name] = foot
        self.slots += 1
        self.memory += foot.host
        _add(self.devices, foot.devices)

    def freeing(self, foot: Footprint) -> None:
        """Count ``foot`` as being freed (a stopping model, or one evicted by a plan)."""
        self.freeing_slots += 1
        self.freeing_memory += foot.host
        _add(self.freeing_devices, foot.devices)


def _add(into: dict[str, int], parts: Mapping[str, int], sign: int = 1) -> None:
    for name, size in parts.items():
        into[name] = into.get(name, 0) + sign * size


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
    footprint: Footprint | None = None  # what it takes there (None: judged by a size alone)
    short: tuple[DeviceShort, ...] = ()  # IMPOSSIBLE: the GPUs it could never fit


def model_need(model: ModelState) -> int:
    """The estimated bytes ``model`` needs loaded (0 while not measured)."""
    return need_bytes(model.shape, model.config.params, model.config.args)


def node_of(model: ModelState) -> str | None:
    """The node whose instance of ``model`` runs (None: the one node of a service without ``--node``)."""
    return model.instance.node if model.instance is not None else None


def loads(state: RouterState, budgets: Sequence[NodeBudget], exiting: int = 0) -> dict[str | None, NodeLoad]:
    """Each node's use in the log; ``exiting``: the local node's workers not reaped yet."""
    tally: dict[str | None, NodeLoad] = {b.name: NodeLoad() for b in budgets}
    gpus = {b.name: b.devices for b in budgets}
    for model in state.models.values():
        load = tally.get(node_of(model)) if model.instance is not None else None
        if load is None or model.instance is None:
            continue
        foot = running_footprint(model, gpus[node_of(model)])
        foot = replace(foot, host=foot.host + draft_need(state, model, model.instance.params))
        load.take(model.name, foot)
        load.running.append(model)
        if model.instance.status is InstanceStatus.STOPPING:
            load.freeing(foot)
        elif model.config.pinned:
            load.pinned_slots += 1
            load.pinned_memory += foot.host
            _add(load.pinned_devices, foot.devices)
    for budget in budgets:
        if budget.local:
            tally[budget.name].slots += exiting
            tally[budget.name].freeing_slots += exiting
    return tally


def _evictable(
    load: NodeLoad, busy: Mapping[str, int], protected: frozenset[str], local: bool, tight: set[str]
) -> list[ModelState]:
    """The idle, unpinned, ready models of a node, the least recently used first; those on a GPU in
    ``tight`` (where the model to load does not fit) before the others."""

    def idle(m: ModelState) -> bool:
        inst = m.instance
        if inst is None or inst.status is not InstanceStatus.READY or m.config.pinned or m.name in protected:
            return False
        if local:
            return busy.get(m.name, 0) == 0
        return inst.stats is None or (inst.stats.slots_busy == 0 and inst.stats.queue_depth == 0)

    def on_tight(m: ModelState) -> bool:
        used = load.uses.get(m.name)
        return used is not None and any(used.devices.get(n, 0) > 0 for n in tight)

    return sorted((m for m in load.running if idle(m)), key=lambda m: (not on_tight(m), m.last_used or _EPOCH, m.name))


def judge(
    model: ModelState,
    budget: NodeBudget,
    load: NodeLoad,
    busy: Mapping[str, int],
    protected: frozenset[str],
    need: int | None = None,
    draft: int = 0,
) -> Choice:
    """Rules 1-5 of the module doc for ``model`` on one node; ``need`` overrides its measured need
    (a model not downloaded yet is judged by the size of its files, in RAM alone); ``draft``: the
    bytes of its draft model, in its worker's RAM (:func:`~service.core.draft_source.draft_need`)."""
    foot = Footprint(need) if need is not None else footprint(model, budget.devices)
    foot = replace(foot, host=foot.host + draft)
    choice = _judge(model, budget, load, busy, protected, foot)
    if choice.verdict >= Verdict.BLOCKED and foot.devices and need is None and squeezable(model):
        fewer = footprint(model, budget.devices, load.devices)  # --fit: the layers that fit the GPUs now
        fewer = replace(fewer, host=fewer.host + draft)
        if fewer != foot:
            second = _judge(model, budget, load, busy, protected, fewer)
            return second if second.verdict <= choice.verdict else choice
    return choice


def _judge(
    model: ModelState,
    budget: NodeBudget,
    load: NodeLoad,
    busy: Mapping[str, int],
    protected: frozenset[str],
    foot: Footprint,
) -> Choice:
    limit, memory = budget.models_max, budget.memory
    free = None if memory is None else memory - load.memory
    on = holds(model, budget.name)
    room = {d.name: d.free_bytes for d in budget.devices if d.total_bytes > 0}  # 0/0: memory not reported

    def fits(slots: int, used: int, gpus: Mapping[str, int]) -> bool:
        if (limit and slots >= limit) or (memory is not None and used + foot.host > memory):
            return False
        return all(gpus.get(name, 0) + size <= room.get(name, size) for name, size in foot.devices.items())

    def verdict(kind: Verdict, evict: tuple[str, ...] = (), short: tuple[DeviceShort, ...] = ()) -> Choice:
        return Choice(budget.name, kind, evict, holds=on, free_memory=free, footprint=foot, short=short)

    if fits(load.slots, load.memory, load.devices):
        return verdict(Verdict.FITS)
    short = tuple(
        DeviceShort(d.name, foot.devices[d.name], d.total_bytes, d.free_bytes - load.devices.get(d.name, 0))
        for d in budget.devices
        if d.name in room and foot.devices.get(d.name, 0) > d.free_bytes - load.pinned_devices.get(d.name, 0)
    )
    if (memory is not None and foot.host > memory - load.pinned_memory) or (limit and load.pinned_slots >= limit):
        return verdict(Verdict.IMPOSSIBLE, short=short)
    if short:
        return verdict(Verdict.IMPOSSIBLE, short=short)
    slots, used = load.slots - load.freeing_slots, load.memory - load.freeing_memory
    gpus = dict(load.devices)
    _add(gpus, load.freeing_devices, -1)
    slot_coming = limit == 0 or load.slots < limit or load.freeing_slots > 0  # a slot being freed is claimed
    freeing = load.freeing_slots or load.freeing_memory or any(load.freeing_devices.values())
    if freeing and slot_coming and fits(0, used, gpus):  # the slot: slot_coming's
        return verdict(Verdict.WAITS)
    tight = {n for n, size in foot.devices.items() if gpus.get(n, 0) + size > room.get(n, size)}
    victims: list[str] = []
    for victim in _evictable(load, busy, protected, budget.local, tight):
        victims.append(victim.name)
        gone = load.uses.get(victim.name, Footprint(0))
        slots, used = slots - 1, used - gone.host
        _add(gpus, gone.devices, -1)
        if fits(slots, used, gpus):
            return verdict(Verdict.EVICTS, tuple(victims))
    return verdict(Verdict.BLOCKED)


def best(choices: Sequence[Choice]) -> Choice | None:
    """The node to use among ``choices`` (see the module doc), or None when every one is impossible."""
    usable = [c for c in choices if c.verdict is not Verdict.IMPOSSIBLE]
    if not usable:
        return None
    return min(usable, key=lambda c: (not c.holds, c.verdict, len(c.evict), -(c.free_memory or 0), c.node or ""))


def candidates(model: ModelState, budgets: Sequence[NodeBudget], draft: ModelState | None = None) -> list[NodeBudget]:
    """The nodes that may run ``model``: those holding its files, and its Hub ``draft``'s if it has one
    (a single node: itself)."""
    return [b for b in budgets if holds(model, b.name) and (draft is None or holds(draft, b.name))]


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


def insufficient_memory(
    model: ModelState, budgets: Sequence[NodeBudget], tally: Mapping[str | None, NodeLoad], draft: int = 0
) -> None:
    """Refuse at once (507) when no node could ever take ``model`` (with its ``draft``'s bytes), naming
    the need and the free memory, or the GPU it could never fit (an explicit ``-ngl``, or ``--fit off``)
    and that GPU's figures."""
    nodes = candidates(model, budgets)
    if not nodes or model.shape is None:
        return
    never: list[tuple[NodeBudget, Choice]] = []
    for budget in nodes:
        load = tally[budget.name]
        held, gpus = load.pinned_memory, load.pinned_devices
        pinned = NodeLoad(memory=held, pinned_memory=held, devices=dict(gpus), pinned_devices=dict(gpus))
        choice = judge(model, replace(budget, models_max=0), pinned, {}, frozenset(), draft=draft)
        if choice.verdict is not Verdict.IMPOSSIBLE:
            return
        never.append((budget, choice))
    where = "" if nodes[0].name is None else f" on any node holding it ({', '.join(str(b.name) for b in nodes)})"
    gpu = None if squeezable(model) else next((c.short[0] for _, c in never if c.short), None)
    if gpu is not None:
        raise CommandRejected(
            "insufficient_memory",
            f"model {model.name!r} needs {gpu.words()}{where}; pinned models stay, and its layers are set "
            "(-ngl, or --fit off): lower -ngl, or let --fit choose (-ngl auto)",
            model=model.name,
            device=gpu.device,
            device_need_bytes=gpu.need,
            device_total_bytes=gpu.total,
            device_free_bytes=max(gpu.free, 0),
        )
    need = max((c.footprint.host if c.footprint is not None else 0) for _, c in never)
    most = max(b.memory or 0 for b in nodes)
    free = max((b.memory or 0) - tally[b.name].memory for b in nodes)
    raise CommandRejected(
        "insufficient_memory",
        f"model {model.name!r} needs {need} bytes{where}, but at most {most} bytes are available to models "
        f"and {max(free, 0)} bytes are free; pinned models stay",
        model=model.name,
        need_bytes=need,
        memory_bytes=most,
        free_bytes=max(free, 0),
    )
