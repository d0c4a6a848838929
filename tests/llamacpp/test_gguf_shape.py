"""A GGUF header's facts for the memory estimate (:mod:`service.llamacpp.gguf_shape`), read from real
tiny GGUF files as llama.cpp writes them; what is not a readable GGUF is ``NotMeasurable``."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from devtools.tiny_gguf import write_tiny_gguf
from service.llamacpp.gguf_shape import NotMeasurable, measure, read_metadata


def test_the_header_gives_the_shape_the_estimate_needs(tmp_path: Path) -> None:
    path = write_tiny_gguf(tmp_path / "tiny.gguf", n_layer=3, n_embd=64, n_head=4, n_ctx=256)
    shape = measure(path, 12345)
    assert (shape.path, shape.weights_bytes) == (str(path), 12345)
    assert (shape.n_layer, shape.n_embd, shape.n_head_kv, shape.n_embd_head_k, shape.n_embd_head_v) == (
        3,
        64,
        4,
        16,
        16,
    )
    assert shape.n_ctx_train == 256 and shape.n_vocab > 0
    assert (shape.sliding_window, shape.swa_layers) == (0, 0)
    assert read_metadata(path)["general.architecture"] == "llama"


@pytest.mark.parametrize(
    ("what", "write"),
    [
        ("not a GGUF", lambda p: p.write_bytes(b"PK\x03\x04 a zip, say" * 10)),
        ("a header cut short", lambda p: p.write_bytes(write_tiny_gguf(p).read_bytes()[:40])),
        ("an empty file", lambda p: p.write_bytes(b"")),
        ("a FIFO", lambda p: os.mkfifo(p)),
    ],
)
def test_what_is_not_a_readable_gguf_is_not_measurable(
    tmp_path: Path, what: str, write: Callable[[Path], object]
) -> None:
    path = tmp_path / "model.gguf"
    write(path)
    with pytest.raises(NotMeasurable):
        measure(path, 1)


def test_a_missing_file_is_not_measurable(tmp_path: Path) -> None:
    with pytest.raises(NotMeasurable):
        measure(tmp_path / "gone.gguf", 1)
