"""The tiny GGUF generator produces files real llama.cpp loads and runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from devtools.tiny_gguf import (
    UNSUPPORTED_ARCH,
    write_random_bytes,
    write_text_as_gguf,
    write_tiny_gguf,
    write_truncated_gguf,
    write_unsupported_arch_gguf,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
llama_cpp = pytest.importorskip("llama_cpp")

pytestmark = pytest.mark.timeout(60)


def test_tiny_gguf_is_small_and_deterministic(tmp_path: Path) -> None:
    a = write_tiny_gguf(tmp_path / "a.gguf", seed=1)
    b = write_tiny_gguf(tmp_path / "b.gguf", seed=1)
    c = write_tiny_gguf(tmp_path / "c.gguf", seed=2)
    assert a.stat().st_size < 1_000_000
    assert a.read_bytes()[:4] == b"GGUF"
    assert a.read_bytes() == b.read_bytes()
    assert a.read_bytes() != c.read_bytes()


def test_tiny_gguf_loads_and_generates(tmp_path: Path) -> None:
    path = write_tiny_gguf(tmp_path / "tiny.gguf")
    llm = llama_cpp.Llama(str(path), n_ctx=256, n_threads=1, verbose=False, seed=1)
    assert llm.metadata["general.architecture"] == "llama"
    assert llm.n_ctx() == 256
    out = llm.create_completion("Hello", max_tokens=8, temperature=0.0)
    assert out["usage"]["completion_tokens"] >= 1
    chat = llm.create_chat_completion(messages=[{"role": "user", "content": "hi"}], max_tokens=4)
    assert chat["choices"][0]["message"]["role"] == "assistant"
    # Any UTF-8 round-trips through the byte-level vocabulary.
    text = "héllo <wörld> ✓"
    assert llm.detokenize(llm.tokenize(text.encode(), add_bos=False)).decode() == " " + text


def test_more_layers(tmp_path: Path) -> None:
    path = write_tiny_gguf(tmp_path / "deep.gguf", n_layer=4)
    llm = llama_cpp.Llama(str(path), n_ctx=64, n_threads=1, verbose=False)
    assert llm.metadata["llama.block_count"] == "4"


def test_embedding_variant_pools_per_input(tmp_path: Path) -> None:
    path = write_tiny_gguf(tmp_path / "emb.gguf", embedding=True)
    llm = llama_cpp.Llama(str(path), n_ctx=128, n_threads=1, verbose=False, embedding=True)
    res = llm.create_embedding(["one", "two three"])
    assert len(res["data"]) == 2
    assert all(len(d["embedding"]) == 64 for d in res["data"])


def test_bad_file_helpers(tmp_path: Path) -> None:
    trunc = write_truncated_gguf(tmp_path / "t.gguf")
    full = write_tiny_gguf(tmp_path / "full.gguf")
    assert trunc.read_bytes()[:4] == b"GGUF"
    assert trunc.stat().st_size < full.stat().st_size
    assert write_random_bytes(tmp_path / "r.gguf").read_bytes()[:4] != b"GGUF"
    assert write_text_as_gguf(tmp_path / "x.gguf").read_text().startswith("<!DOCTYPE")
    arch = write_unsupported_arch_gguf(tmp_path / "a.gguf")
    assert UNSUPPORTED_ARCH.encode() in arch.read_bytes()[:2000]
    for bad in (trunc, arch):
        with pytest.raises(ValueError):
            llama_cpp.Llama(str(bad), n_ctx=64, verbose=False)


def test_cli(tmp_path: Path) -> None:
    out = tmp_path / "cli.gguf"
    proc = subprocess.run(
        [sys.executable, "-m", "devtools.tiny_gguf", str(out), "--seed", "3"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert out.read_bytes() == write_tiny_gguf(tmp_path / "same.gguf", seed=3).read_bytes()
