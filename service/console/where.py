"""Where a loaded model runs, as ``modelrouter ps`` shows it: from a ``GET /models`` entry's
``gpu_layers`` and ``offload`` (``-`` where the worker said nothing: still loading, or a log from
before issue 31)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from service.console.format import size

HOST = "CPU"  # service.core.devices.HOST: host memory in a model's breakdown


def gpu_layers(entry: Mapping[str, Any]) -> str:
    """``19/19 (-ngl 99)``: layers offloaded of the model's total, and ``-ngl`` as requested."""
    layers = entry.get("gpu_layers")
    if not layers:
        return "-"
    return f"{layers['offloaded']}/{layers['total']} (-ngl {layers['requested']})"


def devices(entry: Mapping[str, Any]) -> str:
    """The GPUs the model is on, each with the memory it takes there (``Vulkan0 68.2 MB``), or ``CPU``
    when no layer and no buffer went to one."""
    offload = entry.get("offload")
    if not offload:
        return "-"
    on_device: dict[str, int] = dict.fromkeys(offload["devices"], 0)
    for use in offload["memory"]:
        if use["device"] != HOST:
            on_device[use["device"]] = on_device.get(use["device"], 0) + use["total_bytes"]
    if not on_device:
        return HOST
    return ", ".join(f"{name} {size(used)}" for name, used in on_device.items())
