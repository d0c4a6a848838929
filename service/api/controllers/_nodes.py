"""``GET /nodes``: every node of the cluster (any node answers for all), from the fold; a service without
``--node`` lists itself as its one node, ``local``."""

from __future__ import annotations

import os

from litestar import get

from service.api.schemas import DeviceView, NodeList, NodeView, problems
from service.core.cluster import disk_room
from service.core.devices import LOCAL_NODE, Device, NodeDevices
from service.core.node_state import NodeState
from service.core.placement import model_need, node_of
from service.core.state import RouterState
from service.event_store.codec import format_time
from service.event_store.live_state import LiveState
from service.settings import Settings
from service.supervision.instances import InstanceSupervisor
from service.supervision.measure import physical_memory


def this_service(settings: Settings, memory: int) -> NodeState:
    """A service without ``--node`` as the one node it is, for ``GET /nodes`` only: it never joins the
    fold's nodes, so placement (which reads those) is what it was before issue 31."""
    return NodeState(
        name=LOCAL_NODE,
        incarnation="",
        url=settings.advertise_url or f"http://{settings.host}:{settings.port}",
        pid=settings.service_pid,
        cpus=os.cpu_count() or 1,
        ram_bytes=physical_memory(),
        memory_bytes=memory,
        models_max=settings.models_max,
    )


def _device(d: Device) -> DeviceView:
    return DeviceView(
        name=d.name,
        description=d.description,
        type=d.type,
        backend=d.backend,
        total_bytes=d.total_bytes,
        free_bytes=d.free_bytes,
    )


def _view(state: RouterState, n: NodeState, key: str | None) -> NodeView:
    """``n`` with what runs there and what it holds (``key``: its name in the log, None for this service
    without ``--node``: its instances and files carry no node)."""
    loaded = sorted(m.name for m in state.models.values() if m.instance is not None and node_of(m) == key)
    used = sum(model_need(state.models[m]) for m in loaded)
    measured = state.devices.get(key or "", NodeDevices())
    if key is None:
        holds = sorted(m.name for m in state.models.values() if m.available and not m.holders)
    else:
        holds = sorted(m.name for m in state.models.values() if key in m.holders)
    return NodeView(
        name=n.name,
        state=n.state,
        url=n.url,
        incarnation=n.incarnation,
        pid=n.pid,
        cpus=n.cpus,
        ram_bytes=n.ram_bytes,
        memory_bytes=n.memory_bytes,
        models_max=n.models_max,
        joined_at=format_time(n.joined_at) if n.joined_at else None,
        lost_at=format_time(n.lost_at) if n.lost_at else None,
        lost_by=n.lost_by,
        left_at=format_time(n.left_at) if n.left_at else None,
        loaded=loaded,
        memory_used_bytes=used,
        holds=holds,
        disk_free_bytes=n.disk_free,
        disk_reserve_bytes=n.disk_reserve,
        disk_room_bytes=disk_room(state, n.name) if key is not None else None,
        devices=[_device(d) for d in measured.devices],
        gpu_offload=measured.gpu_offload,
        backends=list(measured.backends),
    )


def nodes_view(state: RouterState, node: str | None, here: NodeState | None = None) -> NodeList:
    """The nodes by name with what each runs and holds, and their devices; ``here``: this service
    without ``--node`` (:func:`this_service`), listed first."""
    data = [_view(state, here, None)] if here is not None else []
    data += [_view(state, n, name) for name, n in sorted(state.nodes.items())]
    return NodeList(data=data, node=node)


@get("/nodes", operation_id="listNodes", tags=["cluster"], responses=problems(400))
async def list_nodes(live: LiveState, settings: Settings, instances: InstanceSupervisor) -> NodeList:
    """The cluster's nodes (without ``--node``: this service alone, as ``local``): state (up, left, lost),
    load, models and devices."""
    here = this_service(settings, instances.memory) if settings.node is None else None
    return nodes_view(live.state, settings.node, here)
