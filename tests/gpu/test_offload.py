"""Where a model runs on a GPU build, through the service's own API (``modelrouter serve``, real workers):
``-ngl 99`` offloads every layer and ``GET /models``, ``/api/ps`` and ``modelrouter ps`` say so with the
device and the memory on it; ``-ngl 2`` offloads 2; ``-nkvo`` keeps the KV cache in host memory; ``/api/ps``'s VRAM is what ``nvidia-smi`` sees (NVIDIA
only). Skipped, with the reason, where no GPU device answers (conftest)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from devtools.service_process import ServiceProcess
from service.console.where import devices as devices_cell
from service.core.devices import HOST, Device
from tests.gpu.conftest import TIMEOUT, Serve

pytestmark = pytest.mark.timeout(900)  # a first load may compile a GPU's pipelines; make gpu-check's 1B model

REPO = Path(__file__).resolve().parents[2]


def _completion(svc: ServiceProcess, body: dict[str, Any]) -> dict[str, Any]:
    r = httpx.post(f"{svc.url}/completion", json=body, timeout=TIMEOUT)
    assert r.status_code == 200, r.text
    return dict(r.json())


def _entry(svc: ServiceProcess) -> dict[str, Any]:
    data = httpx.get(f"{svc.url}/models", timeout=30).json()["data"]
    return next(m for m in data if m.get("offload"))


def _on_gpus(offload: dict[str, Any]) -> int:
    return sum(use["total_bytes"] for use in offload["memory"] if use["device"] != HOST)


def _ps_row(svc: ServiceProcess, model: str) -> str:
    env = {**os.environ, "MODELROUTER_URL": svc.url, "COLUMNS": "250"}
    done = subprocess.run(
        [sys.executable, "-m", "service.cli", "ps"], capture_output=True, text=True, env=env, cwd=REPO, timeout=60
    )
    assert done.returncode == 0, done.stderr
    header, *rows = done.stdout.splitlines()
    assert "GPU LAYERS" in header and "DEVICES" in header
    return next(r for r in rows if r.split() and r.split()[0] == model)


def test_ngl_99_offloads_every_layer_and_the_api_and_ps_say_where(
    tmp_path: Path, gpu_model: Path, serve: Serve, gpu_devices: tuple[Device, ...]
) -> None:
    with serve(tmp_path / "home", "-m", str(gpu_model), "-ngl", "99") as svc:
        _completion(svc, {"prompt": "hello", "n_predict": 1})
        entry = _entry(svc)
        offload, layers = entry["offload"], entry["gpu_layers"]
        assert offload["layers"] > 0 and offload["offloaded"] == offload["layers"], offload
        assert layers == {"requested": "99", "offloaded": offload["layers"], "total": offload["layers"]}
        gpu = {d.name: d for d in gpu_devices}
        used = [u for u in offload["memory"] if u["device"] in gpu]
        assert used and set(offload["devices"]) == {u["device"] for u in used} <= set(gpu), offload
        for use in used:  # the weights, their KV cache and a compute buffer, within the device's memory
            assert use["model_bytes"] > 0 and use["kv_bytes"] > 0 and use["compute_bytes"] > 0, use
            assert use["total_bytes"] < gpu[use["device"]].total_bytes
        (ps,) = httpx.get(f"{svc.url}/api/ps", timeout=30).json()["models"]
        assert ps["size_vram"] == _on_gpus(offload) > 0
        assert ps["size"] == sum(use["total_bytes"] for use in offload["memory"]) > ps["size_vram"]
        row = _ps_row(svc, entry["id"])
        assert f"{offload['layers']}/{offload['layers']} (-ngl 99)" in row, row
        assert devices_cell(entry) in row and all(u["device"] in row for u in used), row


def test_ngl_2_offloads_two_layers_and_keeps_the_rest_on_the_cpu(tmp_path: Path, gpu_model: Path, serve: Serve) -> None:
    with serve(tmp_path / "home", "-m", str(gpu_model), "-ngl", "2") as svc:
        _completion(svc, {"prompt": "hello", "n_predict": 1})
        entry = _entry(svc)
        offload = entry["offload"]
        assert (offload["gpu_layers"], offload["offloaded"]) == (2, 2) and offload["layers"] > 2, offload
        assert entry["gpu_layers"] == {"requested": "2", "offloaded": 2, "total": offload["layers"]}
        weights = {u["device"]: u["model_bytes"] for u in offload["memory"]}
        on_gpus = sum(v for k, v in weights.items() if k != HOST)
        assert weights[HOST] > on_gpus > 0, f"most blocks stay in host memory: {weights}"
        (ps,) = httpx.get(f"{svc.url}/api/ps", timeout=30).json()["models"]
        assert 0 < ps["size_vram"] == _on_gpus(offload) < ps["size"]
        assert f"2/{offload['layers']} (-ngl 2)" in _ps_row(svc, entry["id"])


def test_nkvo_keeps_the_kv_cache_in_host_memory_with_every_layer_offloaded(
    tmp_path: Path, gpu_model: Path, serve: Serve
) -> None:
    with serve(tmp_path / "home", "-m", str(gpu_model), "-ngl", "99", "-nkvo") as svc:
        _completion(svc, {"prompt": "hello", "n_predict": 1})
        offload = _entry(svc)["offload"]
    assert offload["offloaded"] == offload["layers"], offload
    kv = {u["device"]: u["kv_bytes"] for u in offload["memory"]}
    assert kv[HOST] > 0 and all(v == 0 for k, v in kv.items() if k != HOST), kv


def _worker_pids(svc: ServiceProcess) -> set[int]:
    return {
        p.pid for p in psutil.Process(svc.pid).children(recursive=True) if "workers.inference" in " ".join(p.cmdline())
    }


def _nvidia_smi_bytes(pids: set[int]) -> int | None:
    """Device memory nvidia-smi reports for these processes, or None when it lists none of them (a
    container's PID namespace hides them)."""
    out = subprocess.run(
        ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    used = [int(mib) for pid, mib in (line.split(",") for line in out.splitlines() if line.strip()) if int(pid) in pids]
    return sum(used) * 1024 * 1024 if used else None


def test_api_ps_size_vram_is_what_nvidia_smi_sees(
    tmp_path: Path, gpu_model: Path, serve: Serve, gpu_devices: tuple[Device, ...]
) -> None:
    if shutil.which("nvidia-smi") is None or not any(d.backend == "CUDA" for d in gpu_devices):
        pytest.skip("size_vram is compared with nvidia-smi's figure: NVIDIA only")
    with serve(tmp_path / "home", "-m", str(gpu_model), "-ngl", "99") as svc:
        _completion(svc, {"prompt": "hello", "n_predict": 1})
        reported = httpx.get(f"{svc.url}/api/ps", timeout=30).json()["models"][0]["size_vram"]
        seen = _nvidia_smi_bytes(_worker_pids(svc))
        if seen is None:
            pytest.skip("nvidia-smi lists no process of this service (PID namespace)")
        assert abs(reported - seen) <= 0.10 * seen, f"/api/ps size_vram {reported} vs nvidia-smi {seen}"
