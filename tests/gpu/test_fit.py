"""llama-server's ``--fit`` on a real device: with ``-ngl auto`` (the default) and a margin (``-fitt``) that
leaves the device too little room for the whole model, the worker offloads fewer layers, llama.cpp reports
that many, and the load's event says what changed and why (``instance_ready.offload.fit``)."""

from __future__ import annotations

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
