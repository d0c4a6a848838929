"""``GET /nodes``: the cluster's nodes, each with its state, load and models."""

from __future__ import annotations

import msgspec


class NodeView(msgspec.Struct, frozen=True):
    """One node's last incarnation, as the log says."""

    name: str
    state: str  # "up", "left" (stopped cleanly: node_left) or "lost" (node_lost)
    url: str
    incarnation: str
    pid: int
    cpus: int
    ram_bytes: int
    memory_bytes: int  # what its models may use (RAM less --models-memory-margin)
    models_max: int
    joined_at: str | None
    lost_at: str | None
    lost_by: str | None
    left_at: str | None
    loaded: list[str]  # models whose instance runs there
    memory_used_bytes: int  # their estimated need
    holds: list[str]  # models whose files it has
    disk_free_bytes: int | None = None  # free where its downloads go: measured at join, less its downloads since
    disk_reserve_bytes: int = 0  # what its downloads must leave free (MODELROUTER_DISK_RESERVE_BYTES)
    disk_room_bytes: int | None = None  # what a new download may still write there (pulls go to the most)


class NodeList(msgspec.Struct, frozen=True):
    """``GET /nodes``; ``self`` is the node that answered (null: a service without ``--node``)."""

    data: list[NodeView]
    node: str | None
