"""``modelrouter ps`` shows where each loaded model runs: ``GPU LAYERS`` (offloaded/total and
``-ngl`` as requested) and ``DEVICES`` (each GPU with the memory the model takes there, or ``CPU``).
A real service (tests/where_it_runs.py): a GPU load appended to its log, a real CPU load."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from devtools.service_process import ServiceProcess
from tests.cli.conftest import cli
from tests.where_it_runs import GPU, TINY, TINY_LAYERS, load_tiny, service

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def svc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    with service(tmp_path_factory.mktemp("ps-devices")) as proc:
        yield proc


def _rows(svc: ServiceProcess) -> dict[str, list[str]]:
    """``ps``'s rows by model, in cells (two spaces or more between columns)."""
    done = cli(svc, "ps")
    assert done.returncode == 0, done.stderr
    header, *lines = done.stdout.splitlines()
    assert "GPU LAYERS" in header and "DEVICES" in header
    return {line.split()[0]: [c.strip() for c in line.split("  ") if c.strip()] for line in lines if line.strip()}


def test_a_gpu_load_in_the_log_shows_its_layers_and_vram(svc: ServiceProcess) -> None:
    """Passes without the worker's part."""
    row = _rows(svc)[GPU]
    assert "19/19 (-ngl 99)" in row and "Vulkan0 68.2 MB" in row  # 65 MiB, in the table's decimal units


def test_a_cpu_build_given_ngl_99_shows_cpu(svc: ServiceProcess) -> None:
    """Needs the inference worker's ``instance_ready.offload``: none of the layers offloaded."""
    load_tiny(svc)
    row = _rows(svc)[TINY]
    assert f"0/{TINY_LAYERS} (-ngl 99)" in row and "CPU" in row
