"""Several nodes on one log: what each node sees as its own, and what a lost node leaves behind.

Every node folds the whole log; each supervises only its own processes. These
pure functions draw the line: :func:`own_view` is the fold as one node's
reconcile and catalogue must see it (its instances, its download jobs, its
files), :func:`budgets` the nodes placement may use (:func:`disk_room`: the
disk each has left for downloads; :func:`pull_site`: where a pull goes), and :func:`on_node_lost`
the events that close what a dead incarnation left running. A node that stops
cleanly says so (:func:`on_leaving`), so the others never take it for lost; one
recorded lost while alive finds it out (:func:`recorded_lost`) and stops what the
log ended (:func:`ended`, :func:`interrupted_here`). Once a node is lost, the
requests forwarded to it are cut (:func:`unreachable`). A service without
``--node`` is the node ``None``: every view of it is the whole fold.

Pure module: stdlib only.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Mapping
from dataclasses import dataclass, replace

import service.core.events as ev
from service.core.decision import Append, Decision, Effect
from service.core.device_placement import node_gpus
from service.core.node_state import NodeState
from service.core.placement import NodeBudget
from service.core.state import DownloadJob, JobStatus, ModelState, RouterState, evolve


@dataclass(frozen=True, slots=True)
class Closing:
    """An event that closes what a lost node left, with its deterministic id (any node may
    detect the loss; the log keeps it once)."""

    event: ev.Event
    model: str | None
    event_id: str


_CLOSINGS = uuid.UUID("6d6f6465-6c72-7472-2d6e-6f64652d6c6f")
"""The namespace of :func:`_closing_id`'s name-based UUIDs (fixed: every node derives the same id)."""


def _closing_id(name: str) -> str:
    """A deterministic event id for ``name`` that fits the log's 36-character ``event_id`` (a UUID5):
    a download job's id is a UUID already, so ``download_interrupted:<job>:<incarnation>`` would not."""
    return str(uuid.uuid5(_CLOSINGS, name))


def _mine(owner: str | None, node: str | None) -> bool:
    # Written by a service without --node: every node treats it as its own (a cluster grown from one).
    return owner is None or owner == node


def _own_model(model: ModelState, node: str) -> ModelState:
    changes: dict[str, object] = {}
    if model.instance is not None and not _mine(model.instance.node, node):
        changes["instance"] = None
    if model.active_job is not None:
        job = model.jobs.get(model.active_job)
        if job is not None and not _mine(job.node, node):
            changes["active_job"] = None
    if model.holders:
        held = model.holders.get(node)
        if held is None:
            changes.update(available=False, path=None, files=(), size=0)
        else:
            changes.update(available=True, path=held.path, files=held.files, size=held.size)
    return model.replace(**changes) if changes else model


def own_view(state: RouterState, node: str | None) -> RouterState:
    """The fold as ``node`` acts on it alone: other nodes' instances and jobs left out, and each
    model's files as this node holds them (a model only others hold has none here)."""
    if node is None:
        return state
    return evolve(state, models={name: _own_model(m, node) for name, m in state.models.items()})


def alive(state: RouterState) -> list[str]:
    """The nodes whose current incarnation is neither lost nor left, by name."""
    return sorted(name for name, n in state.nodes.items() if not n.gone)


def budgets(state: RouterState, node: str | None, local: NodeBudget) -> tuple[NodeBudget, ...]:
    """The nodes placement may use: without a cluster the local budget alone; in one, every live
    node as its ``node_joined`` declared it (the local one with what only it knows), each with its
    :func:`disk_room` and its GPUs (:func:`~service.core.device_placement.node_gpus`)."""
    if node is None:
        return (local,)
    out = [replace(local, room=disk_room(state, node))]
    for name in alive(state):
        if name != node:
            joined = state.nodes[name]
            room, gpus = disk_room(state, name), node_gpus(state, name)
            out.append(NodeBudget(name, joined.models_max, joined.memory_bytes or None, False, room, gpus))
    return tuple(out)


def disk_room(state: RouterState, name: str) -> int | None:
    """The bytes a new download may still write on node ``name``: its free disk as the log knows it
    (:class:`NodeState`), less its reserve and the whole size of its running jobs (the free figure
    falls by a job's bytes only at ``download_finished``, so the part already written counts too).
    None: not known (a node that did not measure it)."""
    node = state.nodes.get(name)
    if node is None or node.disk_free is None:
        return None
    jobs = (m.jobs.get(m.active_job) for m in state.models.values() if m.active_job is not None)
    pending = sum(j.bytes_total for j in jobs if j is not None and j.node == name)
    return node.disk_free - node.disk_reserve - pending


def pull_site(state: RouterState, node: str | None, size: int) -> str | None:
    """The node that downloads a pull of ``size`` bytes (``POST /models``, Ollama's pull): of the live
    nodes, the one with the most :func:`disk_room` (then the name), if the files fit there. None: the
    deciding node (alone, itself the roomiest, or nowhere known to fit: its own disk check decides)."""
    if node is None:
        return None
    rooms = [(room, name) for name in alive(state) if (room := disk_room(state, name)) is not None]
    fitting = [(room, name) for room, name in rooms if room >= size]
    if not fitting:
        return None
    _, best = min(fitting, key=lambda r: (-r[0], r[1]))
    return None if best == node else best


def on_node_lost(state: RouterState, node: str, incarnation: str, detected_by: str) -> list[Closing]:
    """``node_lost`` for that incarnation, then ``instance_lost`` for each instance it ran and
    ``download_interrupted`` for each job its worker moved (resumed when the node comes back)."""
    current = state.nodes.get(node)
    if current is None or current.incarnation != incarnation or current.gone:
        return []
    out = [
        Closing(
            ev.NodeLost(node=node, incarnation=incarnation, detected_by=detected_by), None, f"node_lost:{incarnation}"
        )
    ]
    for model in state.models.values():
        inst = model.instance
        if inst is not None and inst.node == node:
            lost = ev.InstanceLost(instance_id=inst.instance_id, reason="node_lost")
            out.append(Closing(lost, model.name, f"instance_lost:{inst.instance_id}"))
        job = model.jobs.get(model.active_job) if model.active_job is not None else None
        if job is not None and job.node == node:
            stopped = ev.DownloadInterrupted(job_id=job.job_id, bytes_on_disk=job.bytes_done, reason="node_lost")
            out.append(Closing(stopped, model.name, _closing_id(f"download_interrupted:{job.job_id}:{incarnation}")))
    return out


def endpoint_of(state: RouterState, model: ModelState, node: str | None) -> tuple[str, str | None]:
    """Where a request for ready ``model`` goes, seen from ``node``: its worker when it runs here,
    else the service of the node that runs it (workers listen on loopback). Answers ``(url, node)``,
    the node None when the worker is local."""
    inst = model.instance
    assert inst is not None
    if inst.node is None or inst.node == node or inst.node not in state.nodes:
        return inst.endpoint, None
    return state.nodes[inst.node].url, inst.node


def decide_node_lost(state: RouterState, node: str, incarnation: str, detected_by: str) -> Decision[bool]:
    """What ``detected_by`` appends on finding ``node``'s lock free: the closings of
    :func:`on_node_lost`, each with its deterministic id; answers whether there were any."""
    closings = on_node_lost(state, node, incarnation, detected_by)
    return Decision(bool(closings), tuple(Append(c.event, c.model, c.event_id) for c in closings))


def unreachable(state: RouterState, recorded: ev.Recorded) -> NodeState | None:
    """The node whose requests in flight can get no answer any more, now that ``recorded`` is folded
    into ``state``: a ``node_lost`` for its current incarnation (it vanished, maybe without closing
    its sockets, so the forwarding node cuts those requests instead of waiting for TCP)."""
    e = recorded.event
    if not isinstance(e, ev.NodeLost):
        return None
    node = state.nodes.get(e.node)
    return node if node is not None and node.lost and node.incarnation == e.incarnation else None


def lost_to_check(state: RouterState, node: str | None) -> list[tuple[str, str]]:
    """The other nodes whose current incarnation is not known lost or left: ``(name, incarnation)``."""
    return [(n.name, n.incarnation) for n in state.nodes.values() if n.name != node and not n.gone]


def recorded_lost(state: RouterState, node: str, incarnation: str) -> bool:
    """Whether the log says ``node``'s ``incarnation`` is lost: another node found its lock free
    (a cut connection) while it may well be alive, and closed what it ran."""
    current = state.nodes.get(node)
    return current is not None and current.incarnation == incarnation and current.lost


@dataclass(frozen=True, slots=True)
class AbandonEnded(Effect):
    """Stop, without a word (stdin EOF: they record nothing), this node's workers whose instance the
    log ended while they ran: the node was recorded lost, and its instances with it (:func:`ended`)."""


def ended(state: RouterState, running: Mapping[str, str]) -> list[str]:
    """Of the worker processes running here (instance id -> model), those whose instance the log
    no longer has (ended: ``instance_lost`` when this node was recorded lost)."""
    return sorted(
        iid
        for iid, name in running.items()
        if (m := state.models.get(name)) is None or m.instance is None or m.instance.instance_id != iid
    )


def interrupted_here(state: RouterState, running: Collection[str]) -> list[DownloadJob]:
    """Of the download jobs whose worker runs here, those the log interrupted (``download_interrupted``
    when this node was recorded lost): their workers are stopped and the jobs resumed."""
    jobs = (state.job(job_id) for job_id in sorted(running))
    return [job for job in jobs if job is not None and job.status is JobStatus.INTERRUPTED]


def on_leaving(node: str, incarnation: str) -> Append:
    """``node_left`` for a cleanly stopping incarnation, with its deterministic id (a retried
    shutdown append stores it once)."""
    return Append(ev.NodeLeft(node=node, incarnation=incarnation), None, f"node_left:{incarnation}")
