"""``GET /models`` shows where each loaded model runs: ``offload`` (its worker's
``instance_ready.offload``: layers, devices, the memory on each) and ``gpu_layers`` in brief, null
when not loaded or not said; ``/v1/models`` keeps OpenAI's shape with the same additive fields.

First the pure views over a folded log, then a real service (tests/where_it_runs.py): a GPU load
appended to its real SQLite log, and a real worker loading a tiny model with ``-ngl 99``.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest

from devtools.service_process import ServiceProcess
from devtools.tiny_gguf import write_tiny_gguf
from service.api.ollama._views import memory_sizes, ps_view
from service.api.views import models_view
from service.console.where import devices, gpu_layers
from service.core import events as ev
from service.core.devices import MIB
from service.core.fold import replay
from service.core.state import RouterState
from tests.core.test_lifecycles import T0
from tests.eventually import eventually
from tests.where_it_runs import GPU, GPU_OFFLOAD, TINY, TINY_LAYERS, entry, load_tiny, service

pytestmark = pytest.mark.timeout(240)


def _folded(path: Path, offload: dict[str, Any] | None) -> RouterState:
    """``m`` found on disk and loaded; its worker's ``instance_ready`` with ``offload`` (None: said nothing)."""
    size = path.stat().st_size
    events: list[tuple[ev.Event, str]] = [
        (ev.ModelDiscovered(path=str(path), files=({"path": str(path), "size": size},), size=size), "m"),
        (ev.InstanceRequested(instance_id="i1", port=9001), "m"),
        (ev.InstanceLoading(instance_id="i1", pid=10, endpoint="http://127.0.0.1:9001"), "m"),
        (
            ev.InstanceReady(
                instance_id="i1",
                pid=10,
                endpoint="http://127.0.0.1:9001",
                load_ms=1.0,
                n_ctx=256,
                n_params=1,
                file_size=size,
                architecture="llama",
                offload=offload,
            ),
            "m",
        ),
    ]
    return replay(
        [ev.Recorded(i, f"e{i}", model, e, {}, T0 + timedelta(seconds=i)) for i, (e, model) in enumerate(events, 1)]
    )


def _entry(state: RouterState) -> dict[str, Any]:
    """The model's ``GET /models`` entry as the wire carries it."""
    listed: dict[str, Any] = msgspec.to_builtins(models_view(state).data[0])
    return listed


class TestViews:
    def test_a_gpu_load_shows_its_layers_devices_and_memory(self, tmp_path: Path) -> None:
        state = _folded(write_tiny_gguf(tmp_path / "m.gguf"), GPU_OFFLOAD.to_json())
        shown = _entry(state)
        assert shown["offload"] == GPU_OFFLOAD.to_json()
        assert shown["gpu_layers"] == {"requested": "99", "offloaded": 19, "total": 19}
        (running,) = ps_view(state, T0).models
        assert (running.size_vram, running.size) == (65 * MIB, 68 * MIB), "Ollama's size: all of it, VRAM included"
        assert (gpu_layers(shown), devices(shown)) == ("19/19 (-ngl 99)", "Vulkan0 68.2 MB")

    def test_a_load_that_said_nothing_shows_null_and_the_files_size(self, tmp_path: Path) -> None:
        """An ``instance_ready`` from before issue 31: the fields are there, null; ``/api/ps`` as before."""
        path = write_tiny_gguf(tmp_path / "m.gguf")
        state = _folded(path, None)
        shown = _entry(state)
        assert shown["offload"] is None and shown["gpu_layers"] is None
        assert memory_sizes(state.models["m"]) == (path.stat().st_size, 0)
        assert (gpu_layers(shown), devices(shown)) == ("-", "-")

    def test_a_model_not_loaded_shows_null(self, tmp_path: Path) -> None:
        state = _folded(write_tiny_gguf(tmp_path / "m.gguf"), GPU_OFFLOAD.to_json())
        unloaded = replay([ev.Recorded(9, "e9", "m", ev.InstanceStopped(instance_id="i1"), {}, T0)], state)
        shown = _entry(unloaded)
        assert shown["status"]["value"] == "unloaded" and shown["offload"] is None and shown["gpu_layers"] is None
        assert ps_view(unloaded, T0).models == []


@pytest.fixture(scope="module")
def svc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    with service(tmp_path_factory.mktemp("where")) as proc:
        yield proc


def test_a_gpu_load_in_the_log_shows_in_models_and_v1_models(svc: ServiceProcess) -> None:
    """Passes without the worker's part: the ``instance_ready`` is appended to the real log."""
    shown = entry(svc, GPU)
    assert shown["offload"] == GPU_OFFLOAD.to_json()
    assert shown["gpu_layers"] == {"requested": "99", "offloaded": 19, "total": 19}
    openai = httpx.get(f"{svc.url}/v1/models", timeout=10).json()
    assert openai["object"] == "list"
    (listed,) = [m for m in openai["data"] if m["id"] == GPU]
    assert listed["object"] == "model" and listed["owned_by"] == "modelrouter" and isinstance(listed["created"], int)
    assert listed["offload"] == shown["offload"] and listed["gpu_layers"] == shown["gpu_layers"]


def test_a_cpu_build_given_ngl_99_reports_nothing_offloaded(svc: ServiceProcess) -> None:
    """Needs the inference worker's ``instance_ready.offload`` (issue 31's worker part): this CPU build
    takes ``-ngl 99`` as asked, offloads none of the tiny model's layers and keeps its buffers in RAM."""
    shown = load_tiny(svc)
    assert shown["gpu_layers"] == {"requested": "99", "offloaded": 0, "total": TINY_LAYERS}
    offload = shown["offload"]
    assert offload is not None and offload["offloaded"] == 0 and offload["layers"] == TINY_LAYERS
    memory = offload["memory"]
    assert {use["device"] for use in memory} == {"CPU"}, "nothing on a device: host memory only"
    assert sum(use["model_bytes"] for use in memory) > 0
    assert all(use["total_bytes"] == use["model_bytes"] + use["kv_bytes"] + use["compute_bytes"] for use in memory)
    httpx.post(f"{svc.url}/models/unload", json={"model": TINY}, timeout=30).raise_for_status()
    gone = eventually(lambda: (e := entry(svc, TINY))["status"]["value"] == "unloaded" and e, "tiny unloaded")
    assert gone["offload"] is None and gone["gpu_layers"] is None
