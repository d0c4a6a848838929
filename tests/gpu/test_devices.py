"""The devices a GPU build has, as the service shows them: ``modelrouter serve --list-devices`` prints
llama-server's listing and ``GET /nodes`` lists each device with its memory, as the worker measured it
(on lavapipe: ``Vulkan0: llvmpipe (LLVM 15.0.6, 256 bits) (2048 MiB, 2048 MiB free)``)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from service.core.devices import MIB, Device
from tests.gpu.conftest import Serve

pytestmark = pytest.mark.timeout(900)  # a first load may compile a GPU's pipelines; make gpu-check's 1B model

REPO = Path(__file__).resolve().parents[2]


def test_serve_list_devices_prints_every_gpu_with_its_memory(tmp_path: Path, gpu_devices: tuple[Device, ...]) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "service.cli", "serve", "--list-devices", "--home", str(tmp_path), "--port", "1"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO,
        env=dict(os.environ),
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "Available devices:"
    for device in gpu_devices:
        pattern = rf"  {re.escape(device.name)}: {re.escape(device.description)} \((\d+) MiB, (\d+) MiB free\)"
        found = [m for m in map(re.compile(pattern).fullmatch, lines) if m]
        assert found, f"{device.name} not in {done.stdout!r}"
        total, free = (int(v) for v in found[0].groups())
        assert total == device.total_bytes // MIB > 0 and 0 < free <= total


def test_get_nodes_modelrouter_nodes_and_the_metrics_show_the_gpus_with_their_memory(
    tmp_path: Path, serve: Serve, gpu_devices: tuple[Device, ...]
) -> None:
    """A service without ``--node`` lists itself as ``local``, with the devices it measured at start."""
    with serve(tmp_path / "home", "--metrics") as svc:
        (node,) = httpx.get(f"{svc.url}/nodes", timeout=30).json()["data"]
        metrics = httpx.get(f"{svc.url}/metrics", timeout=30).text
        env = {**os.environ, "MODELROUTER_URL": svc.url, "COLUMNS": "250"}
        cmd = [sys.executable, "-m", "service.cli", "nodes"]
        table = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO, timeout=60, check=False)
    assert node["gpu_offload"] is True and table.returncode == 0, table.stderr
    gauges = {
        (x.labels["node"], x.labels["device"], x.labels["kind"]): x.value
        for family in text_string_to_metric_families(metrics)
        if family.name == "modelrouter_device_memory_bytes"
        for x in family.samples
    }
    listed = {d["name"]: d for d in node["devices"]}
    for device in gpu_devices:
        got = listed[device.name]
        assert (got["type"], got["backend"], got["description"]) == (device.type, device.backend, device.description)
        assert got["total_bytes"] == device.total_bytes > 0 and 0 < got["free_bytes"] <= got["total_bytes"]
        assert device.backend in node["backends"]
        assert gauges[("local", device.name, "total")] == device.total_bytes
        assert f"{device.name} ({device.backend}): {device.total_bytes // MIB} MiB" in table.stdout, table.stdout
