"""llama-server's offload flags on a real worker (CPU build): what it gave llama.cpp (its
``llama_params`` log line), where the model went (``instance_ready.offload``), llama-server's
warnings, and ``-dev`` names it refuses in llama-server's words."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from devtools.tiny_gguf import write_tiny_gguf
from devtools.tiny_mmproj import write_tiny_mmproj
from tests.eventually import eventually
from tests.workers.conftest import WorkerProc
from workers.inference._offload_setup import NO_GPU_LAYERS


def records(w: WorkerProc, event: str) -> list[dict[str, Any]]:
    lines = [ln for ln in w.stderr_path.read_text(errors="replace").splitlines() if ln.startswith("{")]
    return [r for r in map(json.loads, lines) if r.get("event") == event]


def used(w: WorkerProc) -> dict[str, Any]:
    """The worker's ``llama_params`` line: the offload fields it loaded with."""
    w.wait_ready()
    found = eventually(lambda: records(w, "llama_params"), "the llama_params line")
    assert len(found) == 1
    return found[0]


def warnings(w: WorkerProc) -> list[str]:
    return [r["text"] for r in records(w, "llama_cpp") if r["level"] == "warning" and r["text"].startswith("warning:")]


def test_defaults_are_llama_servers(spawn_worker: Any, tiny_gguf: Path) -> None:
    w = spawn_worker(tiny_gguf)
    got = used(w)
    assert got["n_gpu_layers"] == -1 and got["split_mode"] == 1 and got["main_gpu"] == 0  # -ngl auto, -sm layer
    assert got["tensor_split"] == [] and got["devices"] == []
    assert got["offload_kqv"] is True and got["op_offload"] is True and got["flash_attn_type"] == -1
    assert warnings(w) == []  # nothing asked of a GPU: nothing to warn about
    offload = w.wait_event("instance_ready")["offload"]
    assert offload["requested"] == "auto" and offload["gpu_layers"] == -1


@pytest.mark.parametrize(
    ("flags", "want"),
    [
        (["-ngl", "7"], {"n_gpu_layers": 7}),
        (["-ngl", "all"], {"n_gpu_layers": -2}),
        (["-sm", "row"], {"split_mode": 2}),
        (["-sm", "none", "-mg", "1"], {"split_mode": 0, "main_gpu": 1}),
        (["-ts", "3,1"], {"tensor_split": [3.0, 1.0]}),
        (["-dev", "none"], {"devices": ["none"]}),
        (["--no-kv-offload"], {"offload_kqv": False}),
        (["--no-op-offload"], {"op_offload": False}),
        (["-fa", "off"], {"flash_attn_type": 0}),
    ],
)
def test_each_flag_reaches_llama_cpp(
    spawn_worker: Any, tiny_gguf: Path, flags: list[str], want: dict[str, Any]
) -> None:
    got = used(spawn_worker(tiny_gguf, *flags))
    assert {k: got[k] for k in want} == want


def test_the_legacy_engine_passes_them_too(spawn_worker: Any, tiny_gguf: Path) -> None:
    w = spawn_worker(
        tiny_gguf, "--engine", "legacy", "-ngl", "5", "-sm", "row", "-mg", "1", "-ts", "1,2", "--no-kv-offload"
    )
    got = used(w)
    assert (got["n_gpu_layers"], got["split_mode"], got["main_gpu"]) == (5, 2, 1)
    assert got["tensor_split"] == [1.0, 2.0] and got["offload_kqv"] is False


def test_mmproj_offload_reaches_the_projector(spawn_worker: Any, tmp_path: Path) -> None:
    model, projector = write_tiny_gguf(tmp_path / "m.gguf", n_ctx=4096), write_tiny_mmproj(tmp_path / "p.gguf")
    assert used(spawn_worker(model, "--mmproj", str(projector)))["mmproj_use_gpu"] is True
    assert used(spawn_worker(model, "--mmproj", str(projector), "--no-mmproj-offload"))["mmproj_use_gpu"] is False


def test_a_cpu_build_given_ngl_99_serves_reports_nothing_offloaded_and_warns_once(
    spawn_worker: Any, tiny_gguf: Path
) -> None:
    w = spawn_worker(tiny_gguf, "-ngl", "99", "-sm", "row", "-ts", "3,1", "-mg", "1")
    endpoint = w.wait_ready()
    offload = w.wait_event("instance_ready")["offload"]
    assert (offload["requested"], offload["gpu_layers"], offload["offloaded"], offload["layers"]) == ("99", 99, 0, 3)
    assert offload["devices"] == [] and [m["device"] for m in offload["memory"]] == ["CPU"]
    assert offload["memory"][0]["kv_bytes"] > 0 and offload["memory"][0]["compute_bytes"] > 0
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    answer = httpx.post(f"{endpoint}/v1/chat/completions", json=body, timeout=60)
    assert answer.status_code == 200, answer.text
    no_effect = "warning: llama.cpp was compiled without support for GPU offload. Setting {} has no effect."
    assert warnings(w) == [
        *NO_GPU_LAYERS,
        no_effect.format("the split mode"),
        no_effect.format("a tensor split"),
        no_effect.format("the main GPU"),
    ]


@pytest.mark.parametrize("name", ["CUDA0", "CPU"])
def test_a_device_this_build_cannot_offload_to_fails_the_load_in_llama_servers_words(
    spawn_worker: Any, tiny_gguf: Path, name: str
) -> None:
    w = spawn_worker(tiny_gguf, "-dev", name)
    failed = w.wait_event("instance_load_failed", timeout=60)
    assert (failed["reason"], failed["message"]) == ("unsupported_option", f"invalid device: {name}")
    assert w.wait_exit() == 3
