"""tests/gpu: the offload path on a real ggml GPU device, through the service's own API.

Backend-neutral: they run wherever the installed llama-cpp-python has a device of type gpu or igpu (CUDA
under ``make gpu-check``; Vulkan on Mesa's software llvmpipe under ``make gpu-path``, on every machine and in
every CI run: issue 38), and are skipped with the reason everywhere else, so ``make test`` collects them on
a CPU build and says why they did not run.

Every service they start gets :func:`serve_flags`: ``-fa off`` where the device is llvmpipe (Mesa 22.3's
lavapipe crashes with SIGSEGV on the first request with flash attention, which ``-fa auto`` turns on), and
the flags in ``MODELROUTER_GPU_SERVE_ARGS``. A flag, not ``LLAMA_ARG_FLASH_ATTN=off``: ``ServiceProcess``
drops every ``LLAMA_*`` variable (it keeps the developer's own llama.cpp settings out of tests), so a
variable set around ``pytest`` never reaches the worker.

The model: ``MODELROUTER_GPU_MODEL`` (``make gpu-check`` writes a ~1B random-weight GGUF there), else a
small generated llama written on the spot.
"""

from __future__ import annotations

import contextlib
import os
import shlex
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path

import pytest

from devtools.service_process import ServiceProcess
from devtools.tiny_gguf import write_tiny_gguf
from service.core.devices import Device

TIMEOUT = 600.0  # a ~1B model's first load on a fresh GPU machine; lavapipe's first pipeline compile (~80 s)
Serve = Callable[..., AbstractContextManager[ServiceProcess]]


def _gpu_devices() -> tuple[Device, ...] | str:
    try:
        from workers.inference.llama._devices import devices
    except ImportError as exc:  # pragma: no cover - llama-cpp-python is a dependency
        return f"llama-cpp-python cannot be imported: {exc}"
    found = tuple(d for d in devices() if d.type in ("gpu", "igpu"))
    return found or "no GPU device: the installed llama-cpp-python lists " + ", ".join(d.name for d in devices())


@pytest.fixture(scope="session")
def gpu_devices() -> tuple[Device, ...]:
    """The build's GPU devices; the test is skipped, saying why, where there is none."""
    found = _gpu_devices()
    if isinstance(found, str):
        pytest.skip(found + " (tests/gpu run under `make gpu-path`, on software Vulkan, and `make gpu-check`)")
    return found


@pytest.fixture(autouse=True)
def _needs_a_gpu(gpu_devices: tuple[Device, ...]) -> None:
    """Every test here needs a GPU device: the skip comes before any service starts."""


@pytest.fixture(scope="session")
def gpu_model(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The GGUF the tests offload: make gpu-check's ~1B model, or a small llama written now."""
    given = os.environ.get("MODELROUTER_GPU_MODEL")
    if given:
        yield Path(given)
        return
    folder = tmp_path_factory.mktemp("gpu-model")
    yield write_tiny_gguf(folder / "gpu-small.gguf", n_layer=8, n_embd=512, n_head=8, n_ff=1536, n_ctx=2048)


def driver_flags(devices: tuple[Device, ...]) -> tuple[str, ...]:
    """The serve flags a device's driver needs: ``-fa off`` on llvmpipe (see the module docstring)."""
    return ("-fa", "off") if any("llvmpipe" in d.description for d in devices) else ()


@pytest.fixture(scope="session")
def serve_flags(gpu_devices: tuple[Device, ...]) -> tuple[str, ...]:
    """Flags every service here gets: the driver's, then ``MODELROUTER_GPU_SERVE_ARGS``."""
    return (*driver_flags(gpu_devices), *shlex.split(os.environ.get("MODELROUTER_GPU_SERVE_ARGS", "")))


@pytest.fixture
def serve(serve_flags: tuple[str, ...]) -> Serve:
    """``serve(home, *args, env=None)``: ``modelrouter serve`` with a llama-server command line and
    :func:`serve_flags`, stopped when the ``with`` block ends."""

    @contextlib.contextmanager
    def serving(home: Path, *args: str, env: dict[str, str] | None = None) -> Iterator[ServiceProcess]:
        svc = ServiceProcess(home, args=[*args, *serve_flags], env=env).start(TIMEOUT)
        try:
            yield svc
        finally:
            svc.stop()

    return serving
