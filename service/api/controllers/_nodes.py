"""``GET /nodes``: every node of the cluster (any node answers for all), from the fold."""

from __future__ import annotations

from litestar import get

from service.api.schemas import NodeList, NodeView, problems
from service.core.cluster import disk_room
from service.core.placement import model_need, node_of
from service.core.state import RouterState
from service.event_store.codec import format_time
from service.event_store.live_state import LiveState
from service.settings import Settings


def nodes_view(state: RouterState, node: str | None) -> NodeList:
    """The nodes by name with what each runs and holds."""
    data = []
    for name, n in sorted(state.nodes.items()):
        loaded = sorted(m.name for m in state.models.values() if m.instance is not None and node_of(m) == name)
        used = sum(model_need(state.models[m]) for m in loaded)
        holds = sorted(m.name for m in state.models.values() if name in m.holders)
        data.append(
            NodeView(
                name=name,
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
                disk_room_bytes=disk_room(state, name),
            )
        )
    return NodeList(data=data, node=node)


@get("/nodes", operation_id="listNodes", tags=["cluster"], responses=problems(400))
async def list_nodes(live: LiveState, settings: Settings) -> NodeList:
    """The cluster's nodes (empty without ``--node``): state (up, left, lost), load and models."""
    return nodes_view(live.state, settings.node)
