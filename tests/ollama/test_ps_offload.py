"""The official ``ollama`` client's ``ps()``: ``size`` is the memory a loaded model takes and
``size_vram`` the part of it on GPUs (Ollama's meaning: ``ollama ps`` prints "100% GPU" when they
are equal, "100% CPU" when ``size_vram`` is 0), from its worker's ``instance_ready.offload``.
A real service (tests/where_it_runs.py): a GPU load appended to its log, a real CPU load."""

from __future__ import annotations

from collections.abc import Iterator

import ollama
import pytest

from devtools.service_process import ServiceProcess
from service.core.devices import MIB
from tests.eventually import eventually
from tests.where_it_runs import GPU, TINY, entry, load_tiny, service

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def svc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    with service(tmp_path_factory.mktemp("ps-offload")) as proc:
        yield proc


@pytest.fixture(scope="module")
def client(svc: ServiceProcess) -> ollama.Client:
    return ollama.Client(host=svc.url, timeout=60)


def _running(client: ollama.Client) -> dict[str, ollama.ProcessResponse.Model]:
    return {m.model or "": m for m in client.ps().models}


def test_a_gpu_load_in_the_log_shows_its_vram(client: ollama.Client) -> None:
    """Passes without the worker's part: 65 MiB on Vulkan0 of 68 MiB in all."""
    gpu = _running(client)[GPU]
    assert gpu.size_vram == 65 * MIB and gpu.size == 68 * MIB
    assert gpu.context_length == 256


def test_a_cpu_build_given_ngl_99_has_nothing_in_vram(client: ollama.Client, svc: ServiceProcess) -> None:
    """Needs the inference worker's ``instance_ready.offload``: ``size`` is what its buffers take in
    RAM (the weights, the KV cache, the compute buffer), ``size_vram`` 0: "100% CPU"."""
    load_tiny(svc)
    tiny = eventually(lambda: _running(client).get(TINY), "tiny in ps")
    offload = entry(svc, TINY)["offload"]
    assert offload is not None, "the worker said where it put the model"
    assert tiny.size_vram == 0
    assert tiny.size == sum(use["total_bytes"] for use in offload["memory"]) > 0
