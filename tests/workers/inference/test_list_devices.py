"""``python -m workers.inference --list-devices``: llama-server's listing of this build's devices, no model
needed; ``--json``: every device (CPU included) with its memory, ``gpu_offload`` and the backends."""

from __future__ import annotations

import json
import subprocess
import sys

from service.core.devices import Device, NodeDevices, list_devices
from workers.inference.llama import devices, supports_gpu_offload


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "workers.inference", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)


def test_the_listing_is_llama_servers_for_this_build() -> None:
    listed = _run("--list-devices")
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout == list_devices(devices()) + "\n"
    if not supports_gpu_offload():  # this CPU build: llama-server's own words
        assert listed.stdout == "Available devices:\n  (none)\n"


def test_json_has_every_device_the_offload_and_the_backends() -> None:
    answered = _run("--list-devices", "--json")
    assert answered.returncode == 0, answered.stderr
    lines = answered.stdout.splitlines()
    assert len(lines) == 1, "one object, on one line"
    value = json.loads(lines[0])
    measured = NodeDevices.of(value)
    assert [d.name for d in measured.devices] == [d.name for d in devices()]
    assert "CPU" in [d.name for d in measured.devices]
    assert measured.gpu_offload == supports_gpu_offload() and "CPU" in measured.backends
    cpu = next(d for d in measured.devices if d.name == "CPU")
    assert cpu.type == "cpu" and cpu.total_bytes > 0 and 0 < cpu.free_bytes <= cpu.total_bytes
    assert set(value["devices"][0]) == set(Device.to_json(cpu)), "Device.to_json's fields, no others"


def test_another_flag_is_a_usage_error() -> None:
    refused = _run("--list-devices", "--model-path", "m.gguf")
    assert refused.returncode == 2 and "unrecognized arguments: --model-path m.gguf" in refused.stderr
    assert refused.stdout == ""
