"""tests/gpu: the offload path on a real ggml GPU device, through the service's own API.

Backend-neutral: they run wherever the installed llama-cpp-python has a device of type gpu or igpu (CUDA
under ``make gpu-check``, Vulkan on Mesa's llvmpipe later: issue 38), and are skipped with the reason
everywhere else, so ``make test`` collects them on a CPU build and says why they did not run.

The model: ``MODELROUTER_GPU_MODEL`` (``make gpu-check`` writes a ~1B random-weight GGUF there), else a
small generated llama written on the spot.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from devtools.tiny_gguf import write_tiny_gguf
from service.core.devices import Device


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
        pytest.skip(found + " (tests/gpu run under `make gpu-check`)")
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
