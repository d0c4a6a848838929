"""How much memory a model needs once loaded: pure arithmetic over its GGUF header's facts.

need = weights + KV cache + compute buffer + worker overhead, for the
context the worker will really create:

* **weights**: the files' size. llama.cpp maps the tensors as stored (a Q4_K_M
  file is its own size in memory), the split parts included.
* **KV cache**: per slot and per cell, every layer keeps ``n_head_kv *
  (n_embd_head_k + n_embd_head_v)`` elements of the cache types (``f16`` by
  default, llama-server's ``--cache-type-k/-v``). The batch engine gives each of
  its ``n_parallel`` slots the full ``n_ctx`` (per slot, capped to the training
  context as the worker caps it); sliding-window layers keep only their window
  plus one batch, as llama.cpp's iSWA cache does.
* **compute buffer**: llama.cpp sizes it for the worst batch: the logits of a
  batch (``n_vocab`` floats per token), the activations (a few ``n_embd``
  vectors per token) and the attention scores over the context. We count
  ``4 * n_batch * (n_vocab + 4 * n_embd + n_ctx)`` bytes: a rough upper bound of
  the same terms, not a replay of llama.cpp's graph planner (``docs/cluster.md``
  says how far off it can be).
* **overhead**: the worker process itself (Python, llama.cpp's code, buffers).

It is a budget, not a measurement: placement compares it with the memory a
node declared (its RAM less ``--models-memory-margin``), which keeps every
decision a function of the log.

Pure module: stdlib only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from service.core.event_base import JSON
from service.core.node_state import ModelShape

WORKER_OVERHEAD = 64 * 1024 * 1024
"""An inference worker's own resident memory before any model: Python, llama.cpp, numpy (measured ~55 MB)."""
DEFAULT_N_CTX = 4096  # the worker's --n-ctx default
DEFAULT_N_PARALLEL = 4  # the worker's --n-parallel default
DEFAULT_N_BATCH = 512  # the worker's --n-batch default
_CACHE_TYPE_BYTES = {
    "f32": 4.0, "f16": 2.0, "bf16": 2.0, "q8_0": 34 / 32, "q5_0": 22 / 32, "q5_1": 24 / 32,
    "q4_0": 18 / 32, "q4_1": 20 / 32, "iq4_nl": 18 / 32,
}  # fmt: skip
"""Bytes per element of llama.cpp's cache types (block size / elements per block)."""


@dataclass(frozen=True, slots=True)
class MemoryNeed:
    """A model's estimated need, by part (bytes)."""

    weights: int
    kv_cache: int
    compute: int
    overhead: int = WORKER_OVERHEAD

    @property
    def total(self) -> int:
        return self.weights + self.kv_cache + self.compute + self.overhead

    def to_json(self) -> dict[str, JSON]:
        """The API's ``memory`` object."""
        return {"total_bytes": self.total, "weights_bytes": self.weights, "kv_cache_bytes": self.kv_cache,
                "compute_bytes": self.compute, "overhead_bytes": self.overhead}  # fmt: skip


def _int_param(params: Mapping[str, JSON], name: str, default: int) -> int:
    value = params.get(name)
    try:
        number = int(value) if value is not None else default
    except (TypeError, ValueError):
        return default
    return number if number > 0 else default


def context_cells(shape: ModelShape, params: Mapping[str, JSON]) -> int:
    """The worker's per-slot context: ``n_ctx`` (0 or unset: its default), capped to the training context."""
    value = params.get("n_ctx")
    try:
        n_ctx = int(value) if value is not None else DEFAULT_N_CTX
    except (TypeError, ValueError):
        n_ctx = DEFAULT_N_CTX
    train = shape.n_ctx_train if shape.n_ctx_train > 0 else n_ctx
    return train if n_ctx <= 0 else min(n_ctx, train)


def slots(params: Mapping[str, JSON]) -> int:
    """The worker's slots: ``n_parallel`` (-1 or unset: 4); an embedding worker runs one."""
    if params.get("embedding") in (True, 1, "1", "true"):
        return 1
    return _int_param(params, "n_parallel", DEFAULT_N_PARALLEL)


def estimate(shape: ModelShape, params: Mapping[str, JSON], args: Mapping[str, JSON] | None = None) -> MemoryNeed:
    """The need of ``shape`` loaded with ``params`` (the worker's) and ``args`` (llama-server's options:
    ``cache-type-k``, ``cache-type-v``)."""
    options = args or {}
    bytes_k = _CACHE_TYPE_BYTES.get(str(options.get("cache-type-k") or "f16").lower(), 2.0)
    bytes_v = _CACHE_TYPE_BYTES.get(str(options.get("cache-type-v") or "f16").lower(), 2.0)
    n_ctx = context_cells(shape, params)
    n_batch = min(_int_param(params, "n_batch", DEFAULT_N_BATCH), max(n_ctx, 1))
    per_cell = shape.n_head_kv * (shape.n_embd_head_k * bytes_k + shape.n_embd_head_v * bytes_v)
    swa = max(0, min(shape.swa_layers, shape.n_layer)) if shape.sliding_window > 0 else 0
    swa_cells = min(n_ctx, shape.sliding_window + n_batch)
    cells = (shape.n_layer - swa) * n_ctx + swa * swa_cells
    kv = int(slots(params) * cells * per_cell)
    compute = 4 * n_batch * (shape.n_vocab + 4 * shape.n_embd + n_ctx)
    return MemoryNeed(weights=shape.weights_bytes, kv_cache=kv, compute=compute)


def need_bytes(shape: ModelShape | None, params: Mapping[str, JSON], args: Mapping[str, JSON] | None = None) -> int:
    """:func:`estimate`'s total, or 0 for a model not measured yet (it is placed by count alone)."""
    return 0 if shape is None else estimate(shape, params, args).total


def parse_margin(text: str, total: int) -> int:
    """``--models-memory-margin``: bytes (``2147483648``, ``2G``, ``512M``) or a share of ``total``
    (``10%``); raises ``ValueError`` for anything else."""
    value = text.strip().upper()
    if value.endswith("%"):
        share = float(value[:-1])
        if not 0 <= share < 100:
            msg = f"a memory margin of {text!r} must be between 0% and 100%"
            raise ValueError(msg)
        return int(total * share / 100)
    units = {"K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}
    factor = units.get(value[-1:], 1)
    number = float(value[:-1] if value[-1:] in units else value.removesuffix("B"))
    if number < 0:
        msg = f"a memory margin of {text!r} must not be negative"
        raise ValueError(msg)
    return int(number * factor)
