"""llama-server's ``--fit`` on a real device: with ``-ngl auto`` (the default) and a margin (``-fitt``) that
leaves the device too little room for the whole model, the worker offloads fewer layers, llama.cpp reports
that many, and the load's event says what changed and why (``instance_ready.offload.fit``)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from devtools.service_process import ServiceProcess
from service.core.devices import MIB, Device
from tests.gpu.conftest import TIMEOUT, Serve
from tests.service_probes import wait_for_event

pytestmark = pytest.mark.timeout(900)  # a first load may compile a GPU's pipelines; make gpu-check's 1B model


def _loaded(svc: ServiceProcess) -> dict[str, Any]:
    """The load's ``instance_ready.offload``, after a request made it load."""
    r = httpx.post(f"{svc.url}/completion", json={"prompt": "hello", "n_predict": 1}, timeout=TIMEOUT)
    assert r.status_code == 200, r.text
    return dict(wait_for_event(svc, "instance_ready")["data"]["offload"])


def test_fit_lowers_the_layers_to_the_device_budget_and_says_why(
    tmp_path: Path, gpu_model: Path, serve: Serve, gpu_devices: tuple[Device, ...]
) -> None:
    """First the room the whole model takes (the default margin leaves plenty: nothing changes), then a
    margin that leaves the device about half that room. ``-c`` is given: ``--fit`` never shrinks an
    explicit context, so the layers are what it lowers."""
    device = gpu_devices[0]
    common = ("-m", str(gpu_model), "-c", "2048", "--device", device.name)
    with serve(tmp_path / "whole", *common) as svc:
        whole = _loaded(svc)
    assert whole["requested"] == "auto" and whole["offloaded"] == whole["layers"] and whole["fit"] == [], whole
    need = sum(u["total_bytes"] for u in whole["memory"] if u["device"] == device.name)
    margin = device.free_bytes // MIB - need // MIB // 2
    with serve(tmp_path / "fitted", *common, "--fit", "on", "-fitt", str(margin)) as svc:
        fitted = _loaded(svc)
        entry = httpx.get(f"{svc.url}/models", timeout=30).json()["data"][0]
    assert 0 < fitted["offloaded"] == fitted["gpu_layers"] < fitted["layers"], fitted
    assert entry["gpu_layers"] == {"requested": "auto", "offloaded": fitted["offloaded"], "total": fitted["layers"]}
    (why,) = fitted["fit"]
    assert f"-ngl auto -> {fitted['offloaded']} of {fitted['layers']} layers" in why, why
    assert device.name in why and f"{margin} MiB margin" in why, why
    on_device = sum(u["total_bytes"] for u in fitted["memory"] if u["device"] == device.name)
    assert 0 < on_device < need, "fewer layers take less of the device"


def test_fit_shrinks_a_context_left_to_the_model_before_the_layers(
    tmp_path: Path, gpu_model: Path, serve: Serve, gpu_devices: tuple[Device, ...]
) -> None:
    """With ``-c 0`` (the model's training context; llama-server's default is 4096, which ``--fit`` keeps
    as set), ``--fit`` shrinks the context first, in steps of 256 cells and no lower than ``--fit-ctx``,
    keeping every layer on the device (llama.cpp's order)."""
    device = gpu_devices[0]
    common = ("-m", str(gpu_model), "--device", device.name, "-c", "0", "--fit-ctx", "256")
    with serve(tmp_path / "whole", *common) as svc:
        whole = _loaded(svc)
    assert whole["fit"] == [] and whole["offloaded"] == whole["layers"], whole
    kv = sum(u["kv_bytes"] for u in whole["memory"] if u["device"] == device.name)
    need = sum(u["total_bytes"] for u in whole["memory"] if u["device"] == device.name)
    margin = device.free_bytes // MIB - (need - kv // 2) // MIB  # room for about half the KV cache
    with serve(tmp_path / "fitted", *common, "-fitt", str(margin)) as svc:
        fitted = _loaded(svc)
    assert fitted["offloaded"] == fitted["layers"], (fitted, margin, whole)
    (why,) = fitted["fit"]
    shrunk = re.fullmatch(r"-c (\d+) -> (\d+): the KV cache did not fit (.*)", why)
    assert shrunk, why
    before, after = int(shrunk[1]), int(shrunk[2])
    assert 256 <= after < before and after % 256 == 0, why
    assert f"{device.name}'s" in shrunk[3] and f"{margin} MiB margin" in shrunk[3], why
    fitted_kv = sum(u["kv_bytes"] for u in fitted["memory"] if u["device"] == device.name)
    assert fitted_kv == kv * after // before, "llama.cpp's KV cache is the fitted context's"
