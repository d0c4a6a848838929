"""Eviction by device memory, through the service's own API: two models whose need on the GPU exceeds
what it has cannot be loaded together, so loading the second evicts the first (Ollama's rule: evict when
a load would not fit in free VRAM), and a ``pin = true`` model (a preset key) is never evicted: a model
that cannot fit beside it is refused with a 507 that names the device.

RAM and the model count cannot be the reason here: the service may use the machine's RAM and has no
count limit. The models are small generated llamas made large on the device by their context: ``ctx-size``
is chosen with the service's own estimate so that one model takes about 70 % of the GPU's free memory (on
lavapipe's 2048 MiB: about 35K cells). Deep and narrow (32 blocks of 256), so that the KV cache, which is
always on the GPU with ``-ngl 99``, is most of it: llama.cpp may keep a large compute buffer in host memory
(on lavapipe, with ``-fa off``, 823 MiB of a 40K context's went to ``Vulkan_Host``)."""

from __future__ import annotations

import math
from pathlib import Path

import httpx
import pytest

from devtools.service_process import ServiceProcess
from devtools.tiny_gguf import write_tiny_gguf
from service.core.device_memory import split_need
from service.core.devices import Device
from service.core.node_state import ModelShape
from service.llamacpp.gguf_shape import measure
from tests.gpu.conftest import TIMEOUT, Serve
from tests.service_probes import events, model_entry, wait_for_event

pytestmark = pytest.mark.timeout(900)  # a first load may compile a GPU's pipelines; make gpu-check's 1B model

SHARE = 0.7
"""The part of the GPU's free memory one model takes: two never fit, one always does."""
MOST_CELLS = 1 << 20
"""Past this context a GPU is too large for the test's models to fill: the test says so."""


def _width(device: Device) -> int:
    """How many times wider than 256 the models are: 1 on lavapipe's 2 GiB, more on a large GPU so that the
    context that fills it stays under :data:`MOST_CELLS` (8, 2048 wide, on an H200's 139 GiB: ~390K cells of
    256 KiB, and 1.3 GB of weights per model)."""
    return max(1, min(8, math.isqrt(device.free_bytes // 2**31)))


def _context_for(path: Path, device: Device, flash_attn: str) -> int:
    """The smallest context (in steps of 1024 cells) with which the model takes :data:`SHARE` of the GPU,
    by the service's own estimate (:func:`split_need`)."""
    m = measure(path, path.stat().st_size)
    shape = ModelShape(**{f: getattr(m, f) for f in ModelShape.__dataclass_fields__})
    n_ctx = 1024
    while True:
        params = {"n_ctx": n_ctx, "n_gpu_layers": "99", "flash_attn": flash_attn}
        need = sum(u.total_bytes for u in split_need(shape, params, (device,)) if u.device == device.name)
        if need >= SHARE * device.free_bytes:
            return n_ctx
        n_ctx += 1024
        if n_ctx > MOST_CELLS:
            pytest.skip(
                f"{device.name} ({device.free_bytes >> 20} MiB free) is too large for the test's models to fill"
            )


def _load(svc: ServiceProcess, model: str) -> httpx.Response:
    return httpx.post(f"{svc.url}/completion", json={"model": model, "prompt": "hi", "n_predict": 1}, timeout=TIMEOUT)


def _status(svc: ServiceProcess, model: str) -> str:
    return str(model_entry(svc, model)["status"]["value"])


def test_models_that_do_not_fit_the_gpu_together_evict_by_its_memory_and_a_pin_stays(
    tmp_path: Path, serve: Serve, gpu_devices: tuple[Device, ...], serve_flags: tuple[str, ...]
) -> None:
    device = gpu_devices[0]
    models = tmp_path / "models"
    names = ("big-a", "big-b", "big-pinned")
    width = _width(device)
    for seed, name in enumerate(names):
        write_tiny_gguf(
            models / f"{name}.gguf", seed=seed, n_layer=32, n_embd=256 * width, n_head=4 * width, n_ff=512, n_ctx=2048
        )
    fa_off = "-fa" in serve_flags and serve_flags[serve_flags.index("-fa") + 1] == "off"
    n_ctx = _context_for(models / "big-a.gguf", device, "off" if fa_off else "auto")
    presets = tmp_path / "presets.ini"
    presets.write_text("".join(f"[{n}]\nctx-size = {n_ctx}\n{'pin = true' if 'pin' in n else ''}\n" for n in names))
    env = {"MODELROUTER_PRESETS": str(presets), "MODELROUTER_MODELS_MAX": "0"}
    args = ("--models-dir", str(models), "-ngl", "99", "--device", device.name)
    with serve(tmp_path / "home", *args, env=env) as svc:
        assert _load(svc, "big-a").status_code == 200
        offload = model_entry(svc, "big-a")["offload"]
        on_gpu = sum(u["total_bytes"] for u in offload["memory"] if u["device"] == device.name)
        assert on_gpu > device.free_bytes // 2, f"one model takes more than half of {device.name}: {offload}"

        # The second does not fit beside the first on the GPU: the idle first is evicted for it.
        assert _load(svc, "big-b").status_code == 200
        assert wait_for_event(svc, "instance_stop_requested", model="big-a")["data"]["reason"] == "evicted"
        assert _status(svc, "big-b") == "loaded"

        # A pinned model evicts the idle one; then nothing fits beside it: a 507 naming the GPU, the pin stays.
        assert httpx.post(f"{svc.url}/models/load", json={"model": "big-pinned"}, timeout=TIMEOUT).status_code == 200
        wait_for_event(svc, "instance_ready", timeout=TIMEOUT, model="big-pinned")
        assert wait_for_event(svc, "instance_stop_requested", model="big-b")["data"]["reason"] == "evicted"
        refused = _load(svc, "big-a")
        assert refused.status_code == 507, refused.text
        assert device.name in refused.json()["detail"], refused.json()
        assert _status(svc, "big-pinned") == "loaded"
        assert events(svc, type="instance_stop_requested", model="big-pinned") == []
