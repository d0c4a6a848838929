"""A model's memory need from its GGUF header's facts: weights, KV cache, compute buffer, overhead."""

from __future__ import annotations

import pytest

from service.core.memory import WORKER_OVERHEAD, KvLayout, estimate, kv_layout, need_bytes, parse_margin
from service.core.node_state import ModelShape
from tests.core.shapes import llama_8b

# A Llama-3-8B-like header: 32 layers, 8 KV heads of 128, 128256 tokens, 8192 trained context.
LLAMA = llama_8b()


def test_the_kv_cache_is_the_contexts_cells_times_each_layers_keys_and_values() -> None:
    """``-np 4``: four streams of ``-c / 4`` cells; ``-c`` cells in all, whatever the slots."""
    need = estimate(LLAMA, {"n_ctx": 4096, "n_parallel": 4})
    assert need.kv_cache == 4096 * 32 * 8 * (128 + 128) * 2  # f16: 2 bytes, 512 MiB in all
    assert need.weights == LLAMA.weights_bytes and need.overhead == WORKER_OVERHEAD
    assert need.compute == 4 * 512 * (128256 + 2 * 4096)  # the logits phase: larger than the attention
    assert need.total == need.weights + need.kv_cache + need.compute + need.overhead


def test_np_auto_is_one_pool_of_the_whole_context() -> None:
    """No ``n_parallel`` (or -1): the worker's one pool of ``-c`` cells, beyond the trained context if
    asked (llama.cpp allows it); an explicit count splits ``-c`` and caps each share to the trained one."""
    cell = 32 * 8 * 256 * 2
    assert (
        kv_layout(LLAMA, {"n_ctx": 4096})
        == kv_layout(LLAMA, {"n_ctx": 4096, "n_parallel": -1})
        == KvLayout(1, 4096, 4096)
    )
    assert estimate(LLAMA, {"n_ctx": 32768}).kv_cache == 32768 * cell
    assert estimate(LLAMA, {"n_ctx": 32768, "n_parallel": 2}).kv_cache == 2 * 8192 * cell
    assert estimate(LLAMA, {"n_ctx": 32768, "n_parallel": 2, "kv_unified": True}).kv_cache == 32768 * cell


def test_each_stream_is_padded_to_256_cells() -> None:
    assert kv_layout(LLAMA, {"n_ctx": 1000, "n_parallel": 8}) == KvLayout(8, 256, 256)
    assert kv_layout(LLAMA, {"n_ctx": 1000}) == KvLayout(1, 1024, 1024)


def test_the_worker_defaults_apply_and_the_context_is_capped_to_the_trained_one() -> None:
    assert estimate(LLAMA, {}).kv_cache == estimate(LLAMA, {"n_ctx": 4096, "n_parallel": 4}).kv_cache
    assert (
        estimate(LLAMA, {"n_ctx": 0, "n_parallel": 1}).kv_cache
        == estimate(LLAMA, {"n_ctx": 8192, "n_parallel": 1}).kv_cache
    )
    assert estimate(LLAMA, {"n_ctx": 100_000, "n_parallel": 1}).kv_cache == 8192 * 32 * 8 * 256 * 2


def test_an_embedding_worker_runs_one_slot() -> None:
    assert estimate(LLAMA, {"embedding": True}).kv_cache == estimate(LLAMA, {"n_parallel": 1}).kv_cache


def test_quantized_cache_types_shrink_the_kv_cache() -> None:
    f16 = estimate(LLAMA, {"n_parallel": 1}).kv_cache
    q8 = estimate(LLAMA, {"n_parallel": 1}, {"cache-type-k": "q8_0", "cache-type-v": "q8_0"}).kv_cache
    assert q8 == int(f16 * (34 / 32) / 2)


def test_sliding_window_layers_keep_only_their_window_and_one_batch() -> None:
    gemma = ModelShape(
        path="g.gguf",
        weights_bytes=1,
        n_layer=6,
        n_embd=640,
        n_head_kv=1,
        n_embd_head_k=256,
        n_embd_head_v=256,
        n_vocab=262144,
        n_ctx_train=32768,
        sliding_window=512,
        swa_layers=5,
    )
    per_cell = 1 * (256 + 256) * 2
    assert estimate(gemma, {"n_ctx": 8192, "n_parallel": 1}).kv_cache == (1 * 8192 + 5 * (512 + 512)) * per_cell
    # A smaller micro-batch (-ub) leaves fewer extra cells; --swa-full keeps every cell, as llama.cpp does.
    small = estimate(gemma, {"n_ctx": 8192, "n_parallel": 1, "n_ubatch": 256}).kv_cache
    assert small == (1 * 8192 + 5 * (512 + 256)) * per_cell
    assert estimate(gemma, {"n_ctx": 8192, "n_parallel": 1, "swa_full": True}).kv_cache == 6 * 8192 * per_cell


def test_a_model_not_measured_needs_nothing_known() -> None:
    assert need_bytes(None, {}) == 0


@pytest.mark.parametrize(
    ("text", "total", "expected"),
    [
        ("10%", 1000, 100),
        ("0%", 1000, 0),
        ("2G", 0, 2 * 1024**3),
        ("512M", 0, 512 * 1024**2),
        ("1234", 0, 1234),
    ],
)
def test_a_margin_is_bytes_or_a_share_of_the_memory(text: str, total: int, expected: int) -> None:
    assert parse_margin(text, total) == expected


@pytest.mark.parametrize("text", ["lots", "150%", "-1G", ""])
def test_a_bad_margin_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_margin(text, 1000)
