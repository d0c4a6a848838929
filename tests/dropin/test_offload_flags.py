"""llama-server's offload flags through ``modelrouter serve``: each set on the command line, as a
preset key and as its ``LLAMA_ARG_*`` variable reaches llama.cpp in the model's worker, as the
worker's ``llama_params`` line (``GET /models/{id}/logs``) says."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx

from devtools.service_process import ServiceProcess
from tests.dropin.conftest import Serve, chat
from tests.eventually import eventually

# What every way of setting the flags below asks of llama.cpp.
WANT = {
    "n_gpu_layers": 7,
    "split_mode": 2,
    "main_gpu": 1,
    "tensor_split": [3.0, 1.0],
    "devices": ["none"],
    "offload_kqv": False,
    "flash_attn_type": 0,
}


def used(svc: ServiceProcess, model: str) -> dict[str, Any]:
    """The model's worker's ``llama_params`` line, read through the service."""
    assert chat(svc, model).status_code == 200

    def line() -> dict[str, Any] | None:
        answer = httpx.get(f"{svc.url}/models/{model}/logs", params={"tail": 1000}, timeout=10)
        records = [json.loads(ln) for ln in answer.json()["lines"] if ln.startswith('{"event": "llama_params"')]
        return records[0] if records else None

    return eventually(line, "the worker's llama_params line")


def test_command_line_flags(serve: Serve, tmp_path: Path, tiny: bytes) -> None:
    (tmp_path / "tiny.gguf").write_bytes(tiny)
    flags = [
        "-ngl",
        "7",
        "-sm",
        "row",
        "-mg",
        "1",
        "-ts",
        "3,1",
        "-dev",
        "none",
        "-nkvo",
        "--no-op-offload",
        "-fa",
        "off",
    ]
    svc = serve("-m", str(tmp_path / "tiny.gguf"), *flags)
    got = used(svc, "tiny")
    assert {k: got[k] for k in WANT} == WANT and got["op_offload"] is False


def test_preset_keys(serve: Serve, tmp_path: Path, tiny: bytes) -> None:
    (tmp_path / "tiny.gguf").write_bytes(tiny)
    preset = tmp_path / "p.ini"
    preset.write_text(
        "version = 1\n[tiny]\n"
        f"model = {tmp_path / 'tiny.gguf'}\n"
        "n-gpu-layers = 7\nsplit-mode = row\nmain-gpu = 1\ntensor-split = 3,1\ndevice = none\n"
        "kv-offload = false\nop-offload = false\nflash-attn = off\n"
    )
    got = used(serve("--models-preset", str(preset)), "tiny")
    assert {k: got[k] for k in WANT} == WANT and got["op_offload"] is False


def test_llama_arg_variables(serve: Serve, tmp_path: Path, tiny: bytes) -> None:
    (tmp_path / "tiny.gguf").write_bytes(tiny)
    env = {
        "LLAMA_ARG_N_GPU_LAYERS": "7",
        "LLAMA_ARG_SPLIT_MODE": "row",
        "LLAMA_ARG_MAIN_GPU": "1",
        "LLAMA_ARG_TENSOR_SPLIT": "3/1",
        "LLAMA_ARG_DEVICE": "none",
        "LLAMA_ARG_KV_OFFLOAD": "0",
        "LLAMA_ARG_FLASH_ATTN": "off",
    }
    got = used(serve("-m", str(tmp_path / "tiny.gguf"), env=env), "tiny")
    assert {k: got[k] for k in WANT} == WANT
