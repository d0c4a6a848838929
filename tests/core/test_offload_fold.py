"""Where a loaded model runs, in the fold: ``Instance.offload`` comes from its worker's
``instance_ready`` and goes with the instance; an ``instance_ready`` stored before issue 31 (no
``offload`` in its data) reads as not said. Given stored rows, when folded, then: no I/O."""

from __future__ import annotations

from typing import Any

from service.core import events as ev
from service.core.devices import MIB, DeviceUse, Offload
from service.core.fold import replay
from service.core.state import RouterState
from service.event_store.codec import dumps, format_time, to_recorded
from tests.core.test_lifecycles import T0

M = "tiny"
GPU = Offload(
    requested="99",
    gpu_layers=19,
    offloaded=19,
    layers=19,
    devices=("Vulkan0",),
    memory=(DeviceUse("Vulkan0", model_bytes=48 * MIB, kv_bytes=12 * MIB, compute_bytes=5 * MIB), DeviceUse("CPU")),
)
READY = {
    "instance_id": "i1",
    "pid": 10,
    "endpoint": "http://127.0.0.1:9001",
    "load_ms": 12.5,
    "n_ctx": 256,
    "n_params": 1000,
    "file_size": 1000,
    "architecture": "llama",
}


DISCOVERED = ("model_discovered", {"path": "/m/t.gguf", "files": [{"path": "/m/t.gguf", "size": 1000}], "size": 1000})
REQUESTED = ("instance_requested", {"instance_id": "i1", "port": 9001, "params": {"n_gpu_layers": "99"}})
LOADING = ("instance_loading", {"instance_id": "i1", "pid": 10, "endpoint": "http://127.0.0.1:9001"})


def _rows(*events: tuple[str, dict[str, Any]]) -> list[ev.Recorded]:
    """The events as the log stores them (JSON data, current versions), read back by the codec."""
    return [
        to_recorded(
            (i, f"e{i}", kind, ev.EVENT_TYPES[kind].VERSION, M, dumps(data), dumps({"kind": "t"}), format_time(T0))
        )
        for i, (kind, data) in enumerate(events, start=1)
    ]


def _loaded(ready: dict[str, Any]) -> RouterState:
    return replay(_rows(DISCOVERED, REQUESTED, LOADING, ("instance_ready", ready)))


def test_an_instance_ready_stored_before_issue_31_says_nothing_of_devices() -> None:
    """No ``offload`` key at all in the stored data: the instance is ready, its offload None."""
    inst = _loaded(READY).models[M].instance
    assert inst is not None and inst.status.value == "ready"
    assert inst.offload is None


def test_an_instance_ready_with_offload_gives_the_instance_its_devices() -> None:
    inst = _loaded({**READY, "offload": GPU.to_json()}).models[M].instance
    assert inst is not None and inst.offload == GPU
    assert inst.offload.device_bytes == 65 * MIB  # Ollama's size_vram: the host's buffers left out


def test_a_cpu_builds_offload_has_nothing_on_a_device() -> None:
    """What a CPU build's worker says for ``-ngl 99``: nothing offloaded, its buffers in host memory."""
    cpu = Offload(requested="99", offloaded=0, layers=3, memory=(DeviceUse("CPU", model_bytes=240_000, kv_bytes=4096),))
    inst = _loaded({**READY, "offload": cpu.to_json()}).models[M].instance
    assert inst is not None and inst.offload == cpu and inst.offload.device_bytes == 0


def test_the_offload_goes_with_the_instance() -> None:
    """Held while the worker stops (its memory is still taken), gone with it."""
    ready = ("instance_ready", {**READY, "offload": GPU.to_json()})
    stop = ("instance_stop_requested", {"instance_id": "i1", "reason": "unload"})
    stopping = replay(_rows(DISCOVERED, REQUESTED, LOADING, ready, stop)).models[M].instance
    assert stopping is not None and stopping.status.value == "stopping" and stopping.offload == GPU
    stopped_row = ("instance_stopped", {"instance_id": "i1"})
    assert replay(_rows(DISCOVERED, REQUESTED, LOADING, ready, stop, stopped_row)).models[M].instance is None
    second = (
        ("instance_requested", {"instance_id": "i2", "port": 9002}),
        ("instance_loading", {"instance_id": "i2", "pid": 11, "endpoint": "http://127.0.0.1:9002"}),
        ("instance_ready", {**READY, "instance_id": "i2", "pid": 11}),
    )
    inst = replay(_rows(DISCOVERED, REQUESTED, LOADING, ready, stop, stopped_row, *second)).models[M].instance
    assert inst is not None and inst.instance_id == "i2"
    assert inst.offload is None, "a later load that says nothing does not inherit the last one's devices"
