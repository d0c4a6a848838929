"""``GET /nodes``: the cluster's nodes, each with its state, load and models."""

from __future__ import annotations

import msgspec


class DeviceView(msgspec.Struct, frozen=True):
    """One ggml backend device of a node, as its ``node_devices_measured`` said at its start."""

    name: str  # ggml's: CPU, CUDA0, Vulkan0, Metal
    description: str
    type: str  # ggml_backend_dev_type: cpu, gpu, igpu, accel
    backend: str  # the ggml backend it comes from (CPU, CUDA, Vulkan, Metal)
    total_bytes: int
    free_bytes: int  # free when measured


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
    devices: list[DeviceView] = []  # its devices, CPU included ([]: not measured, or the measuring failed)
    gpu_offload: bool = False  # whether its llama.cpp build offloads layers at all
    backends: list[str] = []  # the ggml backends of its devices


class NodeList(msgspec.Struct, frozen=True):
    """``GET /nodes``; ``node`` is the node that answered (null: a service without ``--node``, which lists
    itself as its one node, ``local``)."""

    data: list[NodeView]
    node: str | None
