"""Where a loaded model went, read from llama.cpp's load log: the layers it offloaded and each
device's buffers (``instance_ready.offload``).

llama.cpp says it in its info lines (``src/llama-model.cpp``, ``llama-kv-cache.cpp``,
``llama-context.cpp`` at the vendored commit)::

    load_tensors: offloaded 19/19 layers to GPU          (only on a build that can offload)
    load_tensors:        CUDA0 model buffer size =   235.16 MiB
    load_tensors:   CPU_Mapped model buffer size =    12.66 MiB
    llama_context:  CUDA_Host  output buffer size =     4.00 MiB
    llama_kv_cache:        CUDA0 KV buffer size =    37.50 MiB
    sched_reserve:        CUDA0 compute buffer size =   514.50 MiB

A buffer is named after its buffer type: host buffers (``CPU``, ``CPU_Mapped``, ``CPU_REPACK``, and
the GPU backends' pinned ``CUDA_Host``/``Vulkan_Host``) count as the host (:data:`HOST`), a
device's own (``CUDA0``, ``Vulkan0``, Metal's ``MTL0``/``MTL0_Mapped``/``MTL0_Private``) as that
device. The output buffer (logits) counts as compute; recurrent state (``RS``) as KV.

Pure module: stdlib and the core only.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from service.core.devices import HOST, DeviceUse, Offload

_OFFLOADED = re.compile(r"offloaded (\d+)/(\d+) layers to GPU")
_BUFFER = re.compile(r":\s+(\S+)\s+(model|KV|RS|.*state|output|compute|LoRA) buffer size =\s*([\d.]+) MiB")
_KIND = {"model": "model", "KV": "kv", "RS": "kv", "output": "compute", "compute": "compute"}
_DEVICE_SUFFIXES = ("_Mapped", "_Private")
MIB = 1024 * 1024


def buffer_device(buffer: str) -> str:
    """The device a llama.cpp buffer lives on: :data:`HOST` for host buffers, else the device's name."""
    if buffer.startswith("CPU") or buffer.endswith("_Host"):
        return HOST
    for suffix in _DEVICE_SUFFIXES:
        if buffer.endswith(suffix):
            return buffer.removesuffix(suffix)
    return buffer


@dataclass(frozen=True, slots=True)
class LoadLog:
    """What a load log says: ``offloaded`` of ``layers`` (None: the line was not printed, as on a
    build without GPU offload), and each device's buffers in the order they first appear."""

    offloaded: int | None = None
    layers: int | None = None
    memory: tuple[DeviceUse, ...] = ()

    @property
    def devices(self) -> tuple[str, ...]:
        """The devices other than the host that hold any of the model's buffers."""
        return tuple(use.device for use in self.memory if use.device != HOST and use.total_bytes > 0)


def parse_load_log(lines: Iterable[str]) -> LoadLog:
    """The offload and buffer lines of a load log (other lines are ignored; a line may carry the
    ``llama_cpp`` prefix of any logger)."""
    offloaded: int | None = None
    layers: int | None = None
    uses: dict[str, dict[str, int]] = {}
    for line in lines:
        found = _OFFLOADED.search(line)
        if found:
            offloaded, layers = int(found[1]), int(found[2])
            continue
        buf = _BUFFER.search(line)
        if buf is None:
            continue
        kind = _KIND.get(buf[2], "model" if buf[2] == "LoRA" else "kv")  # "DSV4 ... state": a cache
        sizes = uses.setdefault(buffer_device(buf[1]), {"model": 0, "kv": 0, "compute": 0})
        sizes[kind] += round(float(buf[3]) * MIB)
    memory = tuple(
        DeviceUse(device, model_bytes=s["model"], kv_bytes=s["kv"], compute_bytes=s["compute"])
        for device, s in uses.items()
    )
    return LoadLog(offloaded, layers, memory)


def offload_report(
    log: LoadLog, *, requested: str, gpu_layers: int, n_layer: int, fit: tuple[str, ...] = ()
) -> Offload:
    """``instance_ready.offload``: ``requested`` (``-ngl`` as given), ``gpu_layers`` (what the worker
    passed after ``--fit``), and what llama.cpp did; without its "offloaded" line (a build that
    cannot offload prints none) nothing was offloaded, of ``n_layer + 1`` layers as llama.cpp counts
    them (the output layer is one)."""
    return Offload(
        requested=requested,
        gpu_layers=gpu_layers,
        offloaded=log.offloaded if log.offloaded is not None else 0,
        layers=log.layers if log.layers is not None else n_layer + 1,
        devices=log.devices,
        memory=log.memory,
        fit=fit,
    )
