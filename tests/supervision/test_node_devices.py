"""This node's devices, measured by a real child process (:mod:`service.supervision.node_devices`):
the inference worker's ``--list-devices --json`` with this machine's llama.cpp, and children that fail,
hang, print nonsense or are cancelled, none of which raises or outlives the call."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

import psutil
import pytest

from service.core.devices import Device, NodeDevices
from service.supervision.node_devices import list_devices_argv, measure
from tests.eventually import eventually


async def test_the_worker_measures_this_machines_devices() -> None:
    measurement = await measure(os.environ)
    assert measurement.error is None
    found = measurement.devices
    cpu = [d for d in found.devices if d.type == "cpu"]
    assert [d.name for d in cpu] == ["CPU"] and cpu[0].total_bytes > 0 and cpu[0].backend == "CPU"
    assert "CPU" in found.backends and set(found.backends) == {d.backend for d in found.devices}
    assert found.gpu_offload == bool(found.offloading), "a CPU build neither offloads nor has a GPU"
    event = measurement.event("a")
    assert event.node == "a" and event.devices == tuple(d.to_json() for d in found.devices)
    assert (event.gpu_offload, event.backends) == (found.gpu_offload, found.backends)
    assert measurement.event(None).node is None


async def test_a_worker_without_llama_cpp_is_an_error_with_no_devices() -> None:
    """``LLAMA_CPP_LIB_PATH`` pointing nowhere: llama-cpp-python finds no library (a real install fault)."""
    measurement = await measure({**os.environ, "LLAMA_CPP_LIB_PATH": "/nonexistent"})
    assert measurement.devices == NodeDevices()
    assert measurement.error is not None and measurement.error.startswith("exit 1: ")
    assert "cannot read llama.cpp's devices" in measurement.error
    assert measurement.event(None).devices == ()


async def test_a_child_that_does_not_answer_is_killed_at_the_timeout(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    hang = [
        sys.executable,
        "-c",
        f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(60)",
    ]
    started = time.monotonic()
    measurement = await measure(os.environ, timeout=2.0, argv=hang)
    assert time.monotonic() - started < 10
    assert measurement.devices == NodeDevices() and measurement.error == "no answer within 2 s"
    # (A child too slow to start on a busy machine never wrote its pid: it was killed all the same.)
    assert not pid_file.exists() or not psutil.pid_exists(int(pid_file.read_text() or 0)), "killed and reaped"


async def test_an_answer_that_is_not_json_is_an_error() -> None:
    talk = [sys.executable, "-c", "print('Available devices:'); print('  (none)')"]
    measurement = await measure(os.environ, argv=talk)
    assert (
        measurement.devices == NodeDevices() and measurement.error == "unreadable answer: no JSON object on its stdout"
    )


async def test_lines_before_the_answer_are_skipped() -> None:
    """A backend that prints on stdout as it initialises (some do): the last JSON line is the answer."""
    cpu = Device("CPU", "x", "cpu", "CPU", 10, 5)
    answer = NodeDevices((cpu,), False, ("CPU",)).to_json()
    talk = [sys.executable, "-c", f"import json; print('ggml_init: hello'); print(json.dumps({answer!r}))"]
    assert (await measure(os.environ, argv=talk)).devices == NodeDevices((cpu,), False, ("CPU",))


async def test_a_missing_interpreter_is_an_error() -> None:
    measurement = await measure(os.environ, argv=["/nonexistent/python", "-m", "workers.inference"])
    assert measurement.error is not None and measurement.error.startswith("cannot start /nonexistent/python")


async def test_cancelling_kills_the_child(tmp_path: Path) -> None:
    """A start that fails while the child runs: the child does not outlive it."""
    pid_file = tmp_path / "pid"
    hang = [
        sys.executable,
        "-c",
        f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(60)",
    ]
    task = asyncio.ensure_future(measure(os.environ, argv=hang))
    await asyncio.to_thread(eventually, lambda: pid_file.exists() and pid_file.read_text(), "the child started")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not psutil.pid_exists(int(pid_file.read_text()))


def test_the_command_is_the_inference_workers() -> None:
    assert list_devices_argv(as_json=True) == [sys.executable, "-m", "workers.inference", "--list-devices", "--json"]
    assert list_devices_argv(as_json=False)[-1] == "--list-devices"
