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


def test_the_tensor_infos_give_each_part_its_stored_bytes(tmp_path: Path) -> None:
    """The embeddings, the output projection and the repeating layers, as the file stores them (F16 in the
    tiny writer): what placement splits between the host and the GPUs; the worker's own header walk
    (``--fit``) reads the same."""
    from service.core.model_shape import model_shape
    from workers.inference._offload_setup import read_shape

    path = write_tiny_gguf(tmp_path / "tiny.gguf", n_layer=3, n_embd=64, n_head=4, n_ctx=256)
    shape = measure(path, path.stat().st_size)
    assert shape.embedding_bytes == shape.output_bytes == shape.n_vocab * 64 * 2
    assert 0 < shape.layers_bytes < shape.weights_bytes - shape.embedding_bytes - shape.output_bytes
    assert shape.layers_bytes % 3 == 0, "three identical layers"
    header = model_shape(str(path), path.stat().st_size, read_metadata(path))
    assert read_shape(str(path)) == header and header is not None
    assert (header.embedding_bytes, header.output_bytes, header.layers_bytes) == (
        shape.embedding_bytes,
        shape.output_bytes,
        shape.layers_bytes,
    )
