"""One real service showing where its models run, for the API, Ollama, CLI and dashboard tests.

``tiny`` is a real tiny GGUF that the tests load for real with ``-ngl 99``: on this CPU build its
worker's ``instance_ready`` says ``offloaded 0`` of ``TINY_LAYERS``, its buffers in host memory (the
inference worker's part of issue 31). ``gpu`` is another tiny GGUF that no worker loads here: the
test appends, as a worker on a Vulkan machine would, its ``instance_requested``, ``instance_loading``
and an ``instance_ready`` with :data:`GPU_OFFLOAD` into the service's real SQLite log, and the
service folds them from its tail like any worker's writes. Its pid is a ``sleep`` of the test's own,
so nothing else is ever signalled, and the hang watch is off (``MODELROUTER_HANG_TIMEOUT=0``): its
endpoint answers nothing.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from devtools.service_process import ServiceProcess
from devtools.tiny_gguf import write_tiny_gguf
from service.core import events as ev
from service.core.devices import MIB, DeviceUse, Offload
from service.event_store.codec import NewEvent
from service.event_store.sync_store import SyncEventStore
from service.settings import Settings
from tests.eventually import eventually

TINY, GPU = "tiny", "gpu"
TINY_LAYERS = 3
"""The tiny model's 2 blocks and its output layer: llama.cpp's "offloaded X/3 layers"."""
GPU_OFFLOAD = Offload(
    requested="99",
    gpu_layers=19,
    offloaded=19,
    layers=19,
    devices=("Vulkan0",),
    memory=(
        DeviceUse("Vulkan0", model_bytes=48 * MIB, kv_bytes=12 * MIB, compute_bytes=5 * MIB),
        DeviceUse("CPU", model_bytes=2 * MIB, compute_bytes=1 * MIB),
    ),
)
"""A 19-layer model all on one Vulkan GPU: 65 MiB there, 3 MiB left in host memory (the token
embeddings and the host's compute buffer, as llama.cpp keeps them)."""


@contextmanager
def service(root: Path) -> Iterator[ServiceProcess]:
    """The service over ``tiny`` and ``gpu`` with ``-ngl 99`` for every model; ``gpu`` seeded as loaded."""
    models = root / "models"
    models.mkdir(parents=True)
    write_tiny_gguf(models / f"{TINY}.gguf", seed=1)
    write_tiny_gguf(models / f"{GPU}.gguf", seed=2)
    sleeper = subprocess.Popen(["sleep", "3600"])
    env = {"MODELROUTER_HANG_TIMEOUT": "0"}
    svc = ServiceProcess(root / "home", env=env, args=["--models-dir", str(models), "-ngl", "99"])
    try:
        svc.start()
        seed_gpu_instance(svc, sleeper.pid)
        yield svc
    finally:
        svc.stop()
        sleeper.kill()
        sleeper.wait()


def seed_gpu_instance(svc: ServiceProcess, pid: int) -> None:
    """``gpu`` loaded on Vulkan0, as its worker's events would say, written by "another process"."""
    store = SyncEventStore(Settings(home=svc.home).db_path, source={"kind": "test"})
    endpoint = "http://127.0.0.1:9"  # discard: nobody is sent a request
    try:
        store.append(
            [
                NewEvent(ev.InstanceRequested(instance_id="gpu-1", port=9, params={"n_gpu_layers": "99"}), GPU),
                NewEvent(ev.InstanceLoading(instance_id="gpu-1", pid=pid, endpoint=endpoint), GPU),
                NewEvent(
                    ev.InstanceReady(
                        instance_id="gpu-1",
                        pid=pid,
                        endpoint=endpoint,
                        load_ms=120.0,
                        n_ctx=256,
                        n_params=1000,
                        file_size=1000,
                        architecture="llama",
                        offload=GPU_OFFLOAD.to_json(),
                    ),
                    GPU,
                ),
            ]
        )
    finally:
        store.close()
    eventually(lambda: entry(svc, GPU)["status"]["value"] == "loaded", "the seeded gpu instance folded", timeout=30)


def entry(svc: ServiceProcess, name: str) -> dict[str, Any]:
    """``name``'s ``GET /models`` entry."""
    data = httpx.get(f"{svc.url}/models", timeout=10).json()["data"]
    found: dict[str, Any] = next(m for m in data if m["id"] == name)
    return found


def load_tiny(svc: ServiceProcess) -> dict[str, Any]:
    """``tiny`` loaded for real; its entry once loaded."""
    httpx.post(f"{svc.url}/models/load", json={"model": TINY}, timeout=30).raise_for_status()
    return eventually(lambda: (e := entry(svc, TINY))["status"]["value"] == "loaded" and e, "tiny loaded", timeout=120)
