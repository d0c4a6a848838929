"""The fold's handlers of the cluster's events, and where a model's files are, node by node.

``node_joined``, ``node_left`` and ``node_lost`` keep :attr:`RouterState.nodes`;
``model_measured`` a model's shape. :func:`after` runs after every handler:
an event whose ``source`` names a node (every writer of a ``--node`` service
stamps it) also says which node holds a model's files (``model_discovered``,
``download_finished``: that node's cache) or no longer does
(``model_removed``: a model another node still holds stays available), and
which node runs a download job (``download_requested``: its ``node``, placed
there by another node's decision, else the writer). The same two events keep
that node's free disk up to date between its joins: a finished download used
the bytes it transferred, a removal freed ``bytes_freed``. A log without
nodes folds exactly as before.

Pure module: stdlib only.
"""

from __future__ import annotations

import service.core.events as ev
from service.core.devices import Device, NodeDevices
from service.core.fold_support import ensure_model, model_of, on, primary_path, put_model
from service.core.node_state import Holding, ModelShape, NodeState
from service.core.state import RouterState, evolve


@on(ev.NodeJoined)
def _node_joined(state: RouterState, rec: ev.Recorded) -> RouterState:
    e = rec.event
    assert isinstance(e, ev.NodeJoined)
    node = NodeState(
        name=e.node,
        incarnation=e.incarnation,
        url=e.url,
        pid=e.pid,
        cpus=e.cpus,
        ram_bytes=e.ram_bytes,
        memory_bytes=e.memory_bytes,
        models_max=e.models_max,
        gpus=tuple(e.gpus),
        joined_at=rec.recorded_at,
        disk_free=e.disk_free_bytes,
        disk_reserve=e.disk_reserve_bytes,
    )
    return evolve(state, nodes={**state.nodes, e.node: node})


@on(ev.NodeDevicesMeasured)
def _node_devices_measured(state: RouterState, rec: ev.Recorded) -> RouterState:
    e = rec.event
    assert isinstance(e, ev.NodeDevicesMeasured)
    measured = NodeDevices(tuple(Device.of(d) for d in e.devices), e.gpu_offload, tuple(e.backends))
    return evolve(state, devices={**state.devices, e.node or "": measured})


@on(ev.NodeLost)
def _node_lost(state: RouterState, rec: ev.Recorded) -> RouterState:
    e = rec.event
    assert isinstance(e, ev.NodeLost)
    node = state.nodes.get(e.node)
    if node is None or node.incarnation != e.incarnation or node.gone:
        return state  # an older incarnation's loss, told twice, or a node that had left: nothing changes
    lost = evolve(node, lost=True, lost_at=rec.recorded_at, lost_by=e.detected_by)
    return evolve(state, nodes={**state.nodes, e.node: lost})


@on(ev.NodeLeft)
def _node_left(state: RouterState, rec: ev.Recorded) -> RouterState:
    e = rec.event
    assert isinstance(e, ev.NodeLeft)
    node = state.nodes.get(e.node)
    if node is None or node.incarnation != e.incarnation or node.gone:
        return state  # an older incarnation, or one already recorded lost: the first word stands
    return evolve(state, nodes={**state.nodes, e.node: evolve(node, left=True, left_at=rec.recorded_at)})


@on(ev.ModelMeasured)
def _model_measured(state: RouterState, rec: ev.Recorded) -> RouterState:
    e = rec.event
    assert isinstance(e, ev.ModelMeasured)
    model = ensure_model(state, rec)
    if model is None:
        return state
    shape = ModelShape(
        path=e.path,
        weights_bytes=e.weights_bytes,
        n_layer=e.n_layer,
        n_embd=e.n_embd,
        n_head_kv=e.n_head_kv,
        n_embd_head_k=e.n_embd_head_k,
        n_embd_head_v=e.n_embd_head_v,
        n_vocab=e.n_vocab,
        n_ctx_train=e.n_ctx_train,
        sliding_window=e.sliding_window,
        swa_layers=e.swa_layers,
        embedding_bytes=e.embedding_bytes,
        output_bytes=e.output_bytes,
        layers_bytes=e.layers_bytes,
    )
    return put_model(state, model.replace(shape=shape))


def source_node(rec: ev.Recorded) -> str | None:
    """The node that wrote ``rec`` (None: a service without ``--node``)."""
    node = rec.source.get("node")
    return node if isinstance(node, str) and node else None


def after(before: RouterState, state: RouterState, rec: ev.Recorded) -> RouterState:
    """What an event's node adds to its handler's result (see the module doc)."""
    node = source_node(rec)
    e = rec.event
    if node is None or not isinstance(
        e, (ev.ModelDiscovered, ev.DownloadFinished, ev.ModelRemoved, ev.DownloadRequested)
    ):
        return state
    if isinstance(e, ev.DownloadFinished):
        state = _disk_used(state, node, e.bytes_transferred)
    elif isinstance(e, ev.ModelRemoved):
        state = _disk_used(state, node, -e.bytes_freed)
    model = model_of(state, rec)
    if model is None:
        return state
    if isinstance(e, ev.DownloadRequested):
        job = model.jobs.get(e.job_id)
        if job is None:
            return state
        # Placed by another node's decision (``node``), or the writer's own.
        placed = evolve(job, node=e.node or node)
        return put_model(state, model.replace(jobs={**model.jobs, e.job_id: placed}))
    if isinstance(e, ev.ModelRemoved):
        return _removed_on(before, state, rec, node)
    path = e.path if isinstance(e, ev.ModelDiscovered) else primary_path(e.files)
    holding = Holding(path=path, files=tuple(e.files), size=sum(f.size for f in e.files))
    return put_model(state, model.replace(holders={**model.holders, node: holding}))


def _disk_used(state: RouterState, name: str, used: int) -> RouterState:
    """``name``'s free disk once ``used`` bytes were written there (negative: freed)."""
    node = state.nodes.get(name)
    if node is None or node.disk_free is None or used == 0:
        return state
    return evolve(state, nodes={**state.nodes, name: evolve(node, disk_free=max(0, node.disk_free - used))})


def _removed_on(before: RouterState, state: RouterState, rec: ev.Recorded, node: str) -> RouterState:
    model = model_of(state, rec)
    previous = model_of(before, rec)
    if model is None or previous is None:
        return state
    holders = {name: h for name, h in previous.holders.items() if name != node}
    if not holders or model.instance is not None:
        return put_model(state, model.replace(holders=holders))
    # Another node still holds the files: the model stays available, with that node's copy.
    _, other = sorted(holders.items())[0]
    kept = previous.replace(holders=holders, path=other.path, files=other.files, size=other.size)
    return put_model(state, kept)
