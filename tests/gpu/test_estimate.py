"""The estimate by device against what llama.cpp really put on the GPU: placement decides with the
estimate before a model's first load, so its device part must be the device's. The weights (the file's
own tensors, ``model_measured``) and the KV cache within 5 %; the compute buffer is reported beside them
(docs/cluster.md keeps the figures). Skipped, with the reason, where no GPU device answers (conftest)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from service.core.device_memory import split_need
from service.core.devices import Device
from service.core.launch import InferenceLaunch
from service.core.node_state import ModelShape
from service.llamacpp.gguf_shape import measure
from tests.gpu.conftest import TIMEOUT, Serve
from tests.service_probes import events

pytestmark = pytest.mark.timeout(900)


def _within(ours: int, theirs: int, share: float) -> bool:
    return abs(ours - theirs) <= share * theirs


def test_the_estimate_on_the_gpu_is_what_llama_cpp_put_there(
    tmp_path: Path, gpu_model: Path, serve: Serve, gpu_devices: tuple[Device, ...]
) -> None:
    with serve(tmp_path / "home", "-m", str(gpu_model), "-ngl", "99") as svc:
        r = httpx.post(f"{svc.url}/completion", json={"prompt": "hello", "n_predict": 1}, timeout=TIMEOUT)
        assert r.status_code == 200, r.text
        entry = next(m for m in httpx.get(f"{svc.url}/models", timeout=30).json()["data"] if m.get("offload"))
        params: dict[str, Any] = events(svc, type="instance_requested")[-1]["data"]["params"]
    measured = measure(gpu_model, gpu_model.stat().st_size)
    shape = ModelShape(**{k: v for k, v in measured.to_data().items()})  # type: ignore[arg-type]  # the event's fields are the shape's
    assert shape.layers_bytes > 0, "the file's tensors were read"
    ours = {u.device: u for u in split_need(shape, InferenceLaunch.from_params(params), gpu_devices)}
    for real in (u for u in entry["offload"]["memory"] if u["device"] in ours and u["device"] != "CPU"):
        estimate = ours[real["device"]]
        print(real["device"], "compute: llama.cpp", real["compute_bytes"], "ours", estimate.compute_bytes)
        assert _within(estimate.model_bytes, real["model_bytes"], 0.05), (estimate, real)
        assert _within(estimate.kv_bytes, real["kv_bytes"], 0.05), (estimate, real)
