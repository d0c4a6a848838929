"""Where a loaded model runs, in ``GET /models`` entries: its worker's ``instance_ready.offload``
(:class:`service.core.devices.Offload`) as the wire shows it, and the layer count in brief."""

from __future__ import annotations

import msgspec


class DeviceUseView(msgspec.Struct, frozen=True):
    """What the model keeps on one device (``CPU``: host memory), as llama.cpp's load log sizes
    its buffers: weights, KV cache, compute buffer, and their sum."""

    device: str
    model_bytes: int
    kv_bytes: int
    compute_bytes: int
    total_bytes: int


class OffloadView(msgspec.Struct, frozen=True):
    """``offload``: ``requested`` is ``-ngl`` as given (``auto``, ``all``, ``99``); ``gpu_layers`` what
    the worker passed to llama.cpp after ``--fit``; ``offloaded`` of ``layers`` what llama.cpp offloaded;
    ``devices`` the GPUs it offloaded to; ``memory`` each device's buffers; ``fit`` what ``--fit`` changed."""

    requested: str
    gpu_layers: int
    offloaded: int
    layers: int
    devices: list[str]
    memory: list[DeviceUseView]
    fit: list[str]


class GpuLayersView(msgspec.Struct, frozen=True):
    """``gpu_layers``: ``-ngl`` as requested, and llama.cpp's "offloaded X/Y layers to GPU"."""

    requested: str
    offloaded: int
    total: int
