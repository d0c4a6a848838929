"""A model's shape (:class:`~service.core.node_state.ModelShape`) from its GGUF header's key/values.

One derivation for both readers of a header: the service's (``service/llamacpp/gguf_shape``,
``model_measured``) and the worker's (``--fit`` before a load, which may not import the service's
I/O modules). Pure module: stdlib and the core only.
"""

from __future__ import annotations

from collections.abc import Mapping

from service.core.node_state import ModelShape

Header = Mapping[str, int | float | bool | str | None]
"""A GGUF header's key/values, an array as its length."""
SWA_SHARE = {"gemma2": (1, 2), "gemma3": (5, 6), "gemma3n": (4, 5), "cohere2": (3, 4), "llama4": (3, 4)}
"""Architectures whose sliding-window layers llama.cpp lays out by a fixed pattern: (window layers, of every)."""


TENSOR_PARTS = ("modelrouter.embedding_bytes", "modelrouter.output_bytes", "modelrouter.layers_bytes")
"""Keys a header reader that walks the tensor infos adds: the stored bytes of ``token_embd.weight``,
``output.weight`` (0: tied to the embeddings) and the ``blk.*`` tensors together."""


def header_int(meta: Header, key: str, default: int = 0) -> int:
    value = meta.get(key)
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else default


def model_shape(path: str, weights_bytes: int, meta: Header) -> ModelShape | None:
    """The shape of the GGUF at ``path`` (files of ``weights_bytes`` in all); None when the header
    names no ``general.architecture``."""
    arch = str(meta.get("general.architecture") or "")
    if not arch:
        return None
    n_layer = header_int(meta, f"{arch}.block_count")
    n_embd = header_int(meta, f"{arch}.embedding_length")
    n_head = header_int(meta, f"{arch}.attention.head_count", 1) or 1
    n_head_kv = header_int(meta, f"{arch}.attention.head_count_kv", n_head)
    head = n_embd // n_head if n_head else 0
    window = header_int(meta, f"{arch}.attention.sliding_window")
    share = SWA_SHARE.get(arch)
    return ModelShape(
        path=path,
        weights_bytes=weights_bytes,
        n_layer=n_layer,
        n_embd=n_embd,
        n_head_kv=n_head_kv,
        n_embd_head_k=header_int(meta, f"{arch}.attention.key_length", head),
        n_embd_head_v=header_int(meta, f"{arch}.attention.value_length", head),
        n_vocab=header_int(meta, f"{arch}.vocab_size") or header_int(meta, "tokenizer.ggml.tokens"),
        n_ctx_train=header_int(meta, f"{arch}.context_length"),
        sliding_window=window,
        swa_layers=n_layer * share[0] // share[1] if window and share else 0,
        embedding_bytes=header_int(meta, TENSOR_PARTS[0]),
        output_bytes=header_int(meta, TENSOR_PARTS[1]),
        layers_bytes=header_int(meta, TENSOR_PARTS[2]),
    )
