"""The structural GGUF pre-check gives the right reason without loading the model."""

from __future__ import annotations

import struct
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
from workers.inference.llama import GGUFCheckError, inspect_gguf

pytestmark = pytest.mark.timeout(30)


def _reason(path: Path) -> str:
    with pytest.raises(GGUFCheckError) as info:
        inspect_gguf(path)
    assert info.value.message
    return info.value.reason


def test_valid_file(tiny_gguf: Path) -> None:
    info = inspect_gguf(tiny_gguf)
    assert info.architecture == "llama"
    assert info.version == 3
    assert info.n_tensors == 21
    assert info.data_end == info.file_size == tiny_gguf.stat().st_size
    assert info.metadata["llama.context_length"] == 256
    assert "tokenizer.ggml.tokens" not in info.metadata  # arrays are skipped


def test_unsupported_arch_passes_structural_check(tmp_path: Path) -> None:
    # Structure is fine; only llama.cpp can say it does not know the architecture.
    assert inspect_gguf(write_unsupported_arch_gguf(tmp_path / "a.gguf")).architecture == UNSUPPORTED_ARCH


def test_bad_files(tmp_path: Path) -> None:
    assert _reason(write_truncated_gguf(tmp_path / "t.gguf")) == "truncated"
    assert _reason(write_random_bytes(tmp_path / "r.gguf")) == "not_gguf"
    assert _reason(write_text_as_gguf(tmp_path / "x.gguf")) == "not_gguf"
    assert _reason(tmp_path / "missing.gguf") == "file_missing"
    assert _reason(tmp_path) == "file_missing"  # a directory
    (tmp_path / "empty.gguf").write_bytes(b"")
    assert _reason(tmp_path / "empty.gguf") == "truncated"


def test_cut_inside_header_is_truncated(tmp_path: Path) -> None:
    data = write_tiny_gguf(tmp_path / "full.gguf").read_bytes()
    for cut in (6, 30, 500, 3000):
        p = tmp_path / f"cut{cut}.gguf"
        p.write_bytes(data[:cut])
        assert _reason(p) == "truncated", cut


def test_garbage_header_is_corrupt(tmp_path: Path) -> None:
    p = tmp_path / "v99.gguf"
    p.write_bytes(b"GGUF" + struct.pack("<IQQ", 99, 0, 0))
    assert _reason(p) == "corrupt"
    p2 = tmp_path / "counts.gguf"
    p2.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 2**40, 2**40) + b"\0" * 64)
    assert _reason(p2) == "corrupt"
