"""The draft model's own context settings (``-td``, ``-tbd``, ``-ctkd``, ``-ctvd``, ``-ngld``, ``-devd``),
with llama-server's defaults: the target's threads and devices, an f16 KV cache, layers on auto.

The pure mapping first, then a real worker whose draft runs with settings of its own, as llama.cpp's
log of the draft's context reports them.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from devtools.tiny_gguf import write_tiny_gguf
from service.core.launch import InferenceLaunch
from workers.inference.engine._draft_model import draft_config
from workers.inference.llama import CACHE_TYPES, ContextConfig
from workers.inference.llama._offload import Placement

TARGET = ContextConfig(
    n_ctx=4096,
    n_parallel=4,
    n_threads=3,
    n_threads_batch=5,
    type_k=CACHE_TYPES["q8_0"],
    type_v=CACHE_TYPES["q8_0"],
    placement=Placement(n_gpu_layers=10, devices=("Vulkan0",)),
)


def launch(**options: Any) -> InferenceLaunch:
    return InferenceLaunch(**options)


def test_by_default_the_draft_takes_the_targets_threads_and_devices_and_an_f16_cache() -> None:
    cfg = draft_config(launch(), TARGET, n_seq=4)
    assert (cfg.n_ctx, cfg.n_parallel, cfg.n_batch) == (4096, 4, TARGET.n_batch), "the target's shape"
    assert (cfg.n_threads, cfg.n_threads_batch) == (3, 3), "-td: the target's -t; -tbd: -td"
    assert (cfg.type_k, cfg.type_v) == (CACHE_TYPES["f16"], CACHE_TYPES["f16"]), "llama.cpp's draft default"
    assert cfg.placement == Placement(n_gpu_layers=-1, devices=("Vulkan0",)), "-ngld auto, -devd: the target's -dev"
    assert not cfg.embedding and not cfg.warmup


def test_the_drafts_own_settings_win() -> None:
    options = {
        "spec_draft_threads": 2,
        "spec_draft_threads_batch": 0,  # <= 0: every core, as llama.cpp
        "spec_draft_type_k": "q4_0",
        "spec_draft_type_v": "bf16",
        "spec_draft_ngl": "all",
        "spec_draft_device": "none",
    }
    cfg = draft_config(launch(**options), TARGET, n_seq=2)
    assert (cfg.n_parallel, cfg.n_threads, cfg.n_threads_batch) == (2, 2, os.cpu_count())
    assert (cfg.type_k, cfg.type_v) == (CACHE_TYPES["q4_0"], CACHE_TYPES["bf16"])
    assert cfg.placement == Placement(n_gpu_layers=-2, devices=("none",))
    assert draft_config(launch(spec_draft_threads=1), TARGET, 4).n_threads_batch == 1, "-tbd follows -td"


@pytest.mark.timeout(180)
def test_a_worker_drafts_with_a_draft_of_its_own_settings(spawn_worker: Any, tmp_path: Path) -> None:
    gguf = write_tiny_gguf(tmp_path / "tiny.gguf", seed=7)
    draft = ["-md", str(gguf), "-td", "1", "-tbd", "1", "-ctkd", "f32", "-ctvd", "f32", "-ngld", "0", "-devd", "none"]
    spec = spawn_worker(gguf, "--n-ctx", "2048", "--n-parallel", "2", "--spec-type", "draft-simple", *draft)
    plain = spawn_worker(gguf, "--n-ctx", "2048", "--n-parallel", "2")
    spec_url, plain_url = spec.wait_ready(), plain.wait_ready()
    body = {"prompt": "abc abc abc abd", "n_predict": 32, "temperature": 0}
    drafted = httpx.post(f"{spec_url}/completion", json=body, timeout=120).json()
    assert drafted["timings"]["draft_n"] > 0 and drafted["timings"]["draft_n_accepted"] > 0
    assert drafted["content"] == httpx.post(f"{plain_url}/completion", json=body, timeout=120).json()["content"]
    target_ctx, draft_ctx = _contexts(spec.stderr_path)
    assert (target_ctx["K"], target_ctx["V"]) == ("f16", "f16"), "the target's -ctk/-ctv: llama.cpp's f16"
    assert (draft_ctx["K"], draft_ctx["V"]) == ("f32", "f32"), "-ctkd/-ctvd reached the draft's context"
    assert (draft_ctx["n_ctx"], draft_ctx["seqs"]) == (target_ctx["n_ctx"], "2/2"), "the target's size, a seq per slot"


def _contexts(stderr: Path) -> list[dict[str, str]]:
    """llama.cpp's own report of each context the worker made (its ``llama_context: n_ctx`` and
    ``llama_kv_cache: size`` lines, forwarded to the worker's log): the target's, then the draft's."""
    found: list[dict[str, str]] = []
    for line in stderr.read_text().splitlines():
        text = json.loads(line).get("text", "") if line.startswith("{") else ""
        if m := re.match(r"llama_context: n_ctx\s+= (\d+)", text):
            found.append({"n_ctx": m.group(1)})
        elif m := re.match(r"llama_kv_cache: size = .*?(\d+/\d+) seqs\), K \((\w+)\).*V \((\w+)\)", text):
            found[-1].update(seqs=m.group(1), K=m.group(2), V=m.group(3))
    assert len(found) == 2, found
    return found
