"""Each service measures its devices at start, records them, and shows them: real ``modelrouter serve``
processes, their real inference worker's ``--list-devices --json``, this machine's llama.cpp.

Without ``--node`` (llama-server's ``-m F -ngl 99``): ``node_devices_measured`` in the log before the
model loads, ``GET /nodes`` listing the service as its one node, ``local``, ``modelrouter nodes`` and
``/metrics`` (``modelrouter_device_memory_bytes``). A service whose worker cannot read llama.cpp's
devices starts anyway, with a warning and an empty measurement. Two ``--node`` services on one
PostgreSQL log: each records its own, and either one shows both.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from devtools.postgres_server import PostgresServer
from devtools.service_process import ServiceProcess
from devtools.tiny_gguf import write_tiny_gguf
from tests.eventually import eventually
from tests.service_probes import all_running
from workers.inference.llama import devices, supports_gpu_offload

MiB = 1024 * 1024


def _get(svc: ServiceProcess, path: str, **params: Any) -> Any:
    answer = httpx.get(f"{svc.url}{path}", params=params, timeout=30)
    assert answer.status_code == 200, answer.text
    return answer.json()


def _measured(svc: ServiceProcess) -> list[dict[str, Any]]:
    return [e["data"] for e in _get(svc, "/events", type="node_devices_measured", limit=100)["events"]]


def _nodes_command(svc: ServiceProcess) -> str:
    env = {**os.environ, "MODELROUTER_URL": svc.url, "COLUMNS": "240"}
    argv = [sys.executable, "-m", "service.cli", "nodes"]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, check=True).stdout


def _log_lines(svc: ServiceProcess) -> list[dict[str, Any]]:
    return [json.loads(line) for line in svc.log_path.read_text().splitlines() if line.startswith("{")]


def _assert_this_machine(data: dict[str, Any]) -> None:
    """A measurement (an event's data, a GET /nodes entry) of this machine's llama.cpp build."""
    assert [d["name"] for d in data["devices"]] == [d.name for d in devices()]
    cpu = next(d for d in data["devices"] if d["name"] == "CPU")
    assert cpu["type"] == "cpu" and cpu["backend"] == "CPU" and cpu["total_bytes"] > 0
    assert data["gpu_offload"] is supports_gpu_offload() and "CPU" in data["backends"]
    if not supports_gpu_offload():  # this CPU build
        assert data["gpu_offload"] is False and data["backends"] == ["CPU"]


@pytest.mark.timeout(120)
def test_a_single_model_service_measures_records_and_shows_its_devices(tmp_path: Path) -> None:
    model = write_tiny_gguf(tmp_path / "tiny.gguf")
    svc = ServiceProcess(tmp_path / "home", args=["-m", str(model), "-ngl", "99", "--metrics"])
    with all_running(svc):
        events = _get(svc, "/events", limit=100)["events"]
        types = [e["type"] for e in events]
        assert types.count("node_devices_measured") == 1
        # Before the first load: placement has the devices when it places the model.
        assert types.index("node_devices_measured") < types.index("instance_requested")
        [measured] = _measured(svc)
        assert measured["node"] is None
        _assert_this_machine(measured)

        eventually(lambda: _get(svc, "/nodes")["data"][0]["loaded"], "the model loaded")
        answer = _get(svc, "/nodes")
        assert answer["node"] is None and [n["name"] for n in answer["data"]] == ["local"]
        [local] = answer["data"]
        assert local["state"] == "up" and local["url"] == svc.url and local["pid"] == svc.pid
        assert local["loaded"] == ["tiny"] and local["holds"] == ["tiny"] and local["memory_used_bytes"] > 0
        assert local["devices"] == measured["devices"]
        assert (local["gpu_offload"], local["backends"]) == (measured["gpu_offload"], measured["backends"])

        printed = _nodes_command(svc)
        rows = [line.split() for line in printed.splitlines()[1:] if line.strip()]
        assert rows[0][:3] == ["local", "(this)", "up"], printed
        cpu = next(d for d in measured["devices"] if d["name"] == "CPU")
        listed = f"CPU (CPU): {cpu['total_bytes'] // MiB} MiB, {cpu['free_bytes'] // MiB} MiB free"
        assert listed in printed, printed

        metrics = httpx.get(f"{svc.url}/metrics", timeout=30).text
        for kind in ("total", "free"):
            series = f'modelrouter_device_memory_bytes{{device="CPU",kind="{kind}",node="local"}}'
            [line] = [line for line in metrics.splitlines() if line.startswith(series)]
            assert float(line.split()[-1]) == cpu[f"{kind}_bytes"]
    assert any(line["event"] == "devices_measured" for line in _log_lines(svc))


@pytest.mark.timeout(120)
def test_a_worker_that_cannot_measure_leaves_the_start_alone_with_a_warning(tmp_path: Path) -> None:
    """``LLAMA_CPP_LIB_PATH`` pointing nowhere: the worker's llama-cpp-python finds no library (a real
    install fault; the service itself never loads llama.cpp)."""
    env = {"LLAMA_CPP_LIB_PATH": str(tmp_path / "no-such-lib"), "MODELROUTER_MODELS_DIR": str(tmp_path)}
    svc = ServiceProcess(tmp_path / "home", env=env)
    with all_running(svc):
        assert _get(svc, "/health")["status"] == "ok"
        [measured] = _measured(svc)
        assert measured == {"node": None, "devices": [], "gpu_offload": False, "backends": []}
        [local] = _get(svc, "/nodes")["data"]
        assert local["name"] == "local" and local["devices"] == [] and local["state"] == "up"
        assert "modelrouter_device_memory_bytes{" not in httpx.get(f"{svc.url}/metrics", timeout=30).text
    [warning] = [line for line in _log_lines(svc) if line["event"] == "devices_not_measured"]
    assert warning["level"] == "warning" and "cannot read llama.cpp's devices" in warning["error"]


@pytest.fixture
def two_nodes(pg_server: PostgresServer, tmp_path: Path) -> Iterator[tuple[ServiceProcess, ServiceProcess]]:
    url = pg_server.create_database("node_devices", template="modelrouter_template")
    services = []
    for name in ("a", "b"):
        args = ["--database-url", url, "--node", name, "--metrics"]
        env = {"MODELROUTER_MODELS_DIR": str(tmp_path)}
        services.append(ServiceProcess(tmp_path / f"home-{name}", env=env, args=args, advertised=True))
    with all_running(*services):
        yield services[0], services[1]


@pytest.mark.timeout(180)
def test_each_node_records_its_own_devices_and_any_node_shows_all(
    two_nodes: tuple[ServiceProcess, ServiceProcess],
) -> None:
    a, b = two_nodes
    measured = eventually(lambda: (m := _measured(a)) and len(m) == 2 and m, "both nodes' measurements")
    assert sorted(m["node"] for m in measured) == ["a", "b"]
    writers = {
        e["data"]["node"]: e["source"]["node"] for e in _get(a, "/events", type="node_devices_measured")["events"]
    }
    assert writers == {"a": "a", "b": "b"}, "each node measures itself"
    for m in measured:
        _assert_this_machine(m)
    for svc in (a, b):
        answer = _get(svc, "/nodes")
        assert [n["name"] for n in answer["data"]] == ["a", "b"], "no 'local' entry on a node"
        for n in answer["data"]:
            assert n["devices"] == next(m["devices"] for m in measured if m["node"] == n["name"])
            _assert_this_machine(n)
    printed = _nodes_command(b)
    assert printed.count("CPU (CPU): ") == 2 and "b (this)" in printed, printed
    metrics = httpx.get(f"{a.url}/metrics", timeout=30).text
    for node in ("a", "b"):
        assert f'modelrouter_device_memory_bytes{{device="CPU",kind="total",node="{node}"}}' in metrics
    assert 'node="local"' not in metrics
