"""Model headers the core tests size: a Llama-3-8B-like Q4_K_M (32 layers, 8 KV heads of 128,
128256 tokens), as :class:`~service.core.node_state.ModelShape` or its ``model_measured`` fields."""

from __future__ import annotations

from typing import Any

from service.core.node_state import ModelShape

LLAMA_8B_WEIGHTS = 4_920_000_000


def llama_8b_fields(**overrides: Any) -> dict[str, Any]:  # Any: ModelShape's and the event's field values
    """The header's fields (``path``, ``weights_bytes``... ``n_ctx_train`` 8192), with ``overrides``."""
    fields: dict[str, Any] = {  # Any: as above
        "path": "m.gguf",
        "weights_bytes": LLAMA_8B_WEIGHTS,
        "n_layer": 32,
        "n_embd": 4096,
        "n_head_kv": 8,
        "n_embd_head_k": 128,
        "n_embd_head_v": 128,
        "n_vocab": 128256,
        "n_ctx_train": 8192,
    }
    return fields | overrides


def llama_8b(**overrides: Any) -> ModelShape:  # Any: as llama_8b_fields
    """The header as a ModelShape."""
    return ModelShape(**llama_8b_fields(**overrides))
