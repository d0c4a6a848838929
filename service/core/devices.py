"""The devices a node computes on, and where a loaded model's memory went: values shared by the
worker (which measures them), the log (``node_devices_measured``, ``instance_ready.offload``),
placement and the API.

ggml names its devices ``CUDA0``, ``Vulkan0``, ``Metal``, ``CPU``; a device's ``type`` is ggml's
``ggml_backend_dev_type`` (``cpu``, ``gpu``, ``igpu``, ``accel``). Only ``gpu`` and ``igpu`` devices
take offloaded layers (llama-server's ``--list-devices`` lists the others' absence as ``(none)``);
host memory stays the node's RAM budget, as before.

Pure module: stdlib only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from service.core.event_base import JSON

DeviceType = Literal["cpu", "gpu", "igpu", "accel", "meta"]
DEVICE_TYPES: tuple[DeviceType, ...] = ("cpu", "gpu", "igpu", "accel", "meta")
"""``ggml_backend_dev_type``'s values, in its order (``GGML_BACKEND_DEVICE_TYPE_CPU`` is 0)."""
HOST = "CPU"
"""The name of host memory in a model's memory breakdown (llama.cpp's ``CPU``, ``CPU_Mapped`` buffers)."""
MIB = 1024 * 1024
LOCAL_NODE = "local"
"""The node name a service without ``--node`` shows itself under (``GET /nodes``, ``modelrouter nodes``,
the ``node`` label of ``modelrouter_device_memory_bytes``); the fold keeps its devices under ``""``."""
Stored = Mapping[str, JSON]
"""A value as the log stores it (a JSON object): read back tolerantly by each ``of``."""


def _int(value: JSON, default: int = 0) -> int:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else default


def _str(value: JSON, default: str = "") -> str:
    return value if isinstance(value, str) else default


@dataclass(frozen=True, slots=True)
class Device:
    """One ggml backend device, as measured: ``total_bytes`` and ``free_bytes`` are
    ``ggml_backend_dev_memory``'s figures at the time of measuring."""

    name: str
    description: str
    type: DeviceType
    backend: str
    total_bytes: int
    free_bytes: int

    @property
    def offloads(self) -> bool:
        """Whether llama.cpp offloads layers to it (a GPU, discrete or integrated)."""
        return self.type in ("gpu", "igpu")

    def listing(self) -> str:
        """Its line in llama-server's ``--list-devices``."""
        total, free = self.total_bytes // MIB, self.free_bytes // MIB
        return f"  {self.name}: {self.description} ({total} MiB, {free} MiB free)"

    def to_json(self) -> Stored:
        return {
            "name": self.name,
            "description": self.description,
            "type": self.type,
            "backend": self.backend,
            "total_bytes": self.total_bytes,
            "free_bytes": self.free_bytes,
        }

    @classmethod
    def of(cls, value: Stored) -> Device:
        """A stored device, read tolerantly (a field a newer writer added is ignored)."""
        kind = _str(value.get("type"), "gpu")
        return cls(
            name=_str(value.get("name")),
            description=_str(value.get("description")),
            type=kind if kind in DEVICE_TYPES else "gpu",
            backend=_str(value.get("backend")),
            total_bytes=_int(value.get("total_bytes")),
            free_bytes=_int(value.get("free_bytes")),
        )


def list_devices(devices: tuple[Device, ...]) -> str:
    """llama-server's ``--list-devices`` text: every device but the CPU (GPUs, and accelerators such
    as BLAS), or ``(none)``."""
    lines = ["Available devices:"]
    listed = [d for d in devices if d.type != "cpu"]
    lines += [d.listing() for d in listed] if listed else ["  (none)"]
    return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class DeviceUse:
    """What one loaded model keeps on one device (``HOST``: in RAM), as llama.cpp's load log
    sizes its buffers: weights, KV cache (and recurrent state), compute buffer."""

    device: str
    model_bytes: int = 0
    kv_bytes: int = 0
    compute_bytes: int = 0

    @property
    def total_bytes(self) -> int:
        return self.model_bytes + self.kv_bytes + self.compute_bytes

    def to_json(self) -> Stored:
        return {
            "device": self.device,
            "model_bytes": self.model_bytes,
            "kv_bytes": self.kv_bytes,
            "compute_bytes": self.compute_bytes,
            "total_bytes": self.total_bytes,
        }

    @classmethod
    def of(cls, value: Stored) -> DeviceUse:
        return cls(
            device=_str(value.get("device"), HOST),
            model_bytes=_int(value.get("model_bytes")),
            kv_bytes=_int(value.get("kv_bytes")),
            compute_bytes=_int(value.get("compute_bytes")),
        )


@dataclass(frozen=True, slots=True)
class Offload:
    """Where a worker put its model, as it reports in ``instance_ready``: ``requested`` is ``-ngl``
    as given (``auto``, ``all``, ``99``); ``gpu_layers`` what it passed to llama.cpp after ``--fit``;
    ``offloaded`` of ``layers`` what llama.cpp's load log says it offloaded ("offloaded 19/19
    layers to GPU"); ``devices`` the devices it offloaded to; ``memory`` each device's buffers
    (``HOST`` among them); ``fit`` what ``--fit`` changed, and why, in words."""

    requested: str = "auto"
    gpu_layers: int = 0
    offloaded: int = 0
    layers: int = 0
    devices: tuple[str, ...] = ()
    memory: tuple[DeviceUse, ...] = ()
    fit: tuple[str, ...] = ()

    @property
    def device_bytes(self) -> int:
        """Bytes on devices other than the host: Ollama's ``size_vram``."""
        return sum(use.total_bytes for use in self.memory if use.device != HOST)

    def to_json(self) -> Stored:
        return {
            "requested": self.requested,
            "gpu_layers": self.gpu_layers,
            "offloaded": self.offloaded,
            "layers": self.layers,
            "devices": list(self.devices),
            "memory": [use.to_json() for use in self.memory],
            "fit": list(self.fit),
        }

    @classmethod
    def of(cls, value: Stored) -> Offload:
        devices, memory, fit = value.get("devices"), value.get("memory"), value.get("fit")
        return cls(
            requested=_str(value.get("requested"), "auto"),
            gpu_layers=_int(value.get("gpu_layers")),
            offloaded=_int(value.get("offloaded")),
            layers=_int(value.get("layers")),
            devices=tuple(str(d) for d in devices) if isinstance(devices, (list, tuple)) else (),
            memory=tuple(DeviceUse.of(m) for m in memory if isinstance(m, Mapping))
            if isinstance(memory, (list, tuple))
            else (),
            fit=tuple(str(f) for f in fit) if isinstance(fit, (list, tuple)) else (),
        )


@dataclass(frozen=True, slots=True)
class NodeDevices:
    """A node's last ``node_devices_measured``: its devices, whether its build offloads at all, and
    the ggml backends the build carries."""

    devices: tuple[Device, ...] = ()
    gpu_offload: bool = False
    backends: tuple[str, ...] = ()

    @property
    def offloading(self) -> tuple[Device, ...]:
        """The devices that take offloaded layers (GPUs), in ggml's order."""
        return tuple(d for d in self.devices if d.offloads)

    def to_json(self) -> Stored:
        """What ``python -m workers.inference --list-devices --json`` prints (the event's fields)."""
        return {
            "devices": [d.to_json() for d in self.devices],
            "gpu_offload": self.gpu_offload,
            "backends": list(self.backends),
        }

    @classmethod
    def of(cls, value: Stored) -> NodeDevices:
        """A measurement read back tolerantly (a device that is not an object is left out)."""
        devices, backends = value.get("devices"), value.get("backends")
        return cls(
            devices=tuple(Device.of(d) for d in devices if isinstance(d, Mapping))
            if isinstance(devices, (list, tuple))
            else (),
            gpu_offload=value.get("gpu_offload") is True,
            backends=tuple(str(b) for b in backends) if isinstance(backends, (list, tuple)) else (),
        )


def backends_of(devices: tuple[Device, ...]) -> tuple[str, ...]:
    """The ggml backends (``ggml_backend_reg`` names) the devices come from, each once, in ggml's order."""
    return tuple(dict.fromkeys(d.backend for d in devices if d.backend))


def shown_node(node: str | None) -> str:
    """A node's name as the API and the metrics show it: ``--node``'s, else :data:`LOCAL_NODE`."""
    return node or LOCAL_NODE
