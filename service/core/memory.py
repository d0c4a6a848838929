"""How much memory a model needs once loaded: pure arithmetic over its GGUF header's facts.

need = weights + KV cache + compute buffer + worker overhead, for the
context the worker will really create:

* **weights**: the files' size. llama.cpp maps the tensors as stored (a Q4_K_M
  file is its own size in memory), the split parts included.
* **KV cache**: per cell, every layer keeps ``n_head_kv * (n_embd_head_k +
  n_embd_head_v)`` elements of the cache types (``f16`` by default,
  llama-server's ``--cache-type-k/-v``), in the cells the worker's context
  really has (:func:`kv_layout`): with ``-np`` auto (the default) or
  ``kv_unified``, one pool of ``n_ctx`` cells that every slot shares; with an
  explicit ``-np N``, N streams of ``n_ctx / N`` cells (capped to the
  training context), as llama-server shares ``-c``. llama.cpp pads every
  stream to 256 cells, and sliding-window layers keep only their window (one
  per slot in a pool) plus one micro-batch, as its iSWA cache does (all the
  cells with ``--swa-full``).
* **compute buffer**: llama.cpp sizes it for the worst micro-batch (``ub`` =
  ``min(-b, -ub, cells)`` tokens) and reuses memory between the graph's steps,
  so it is the larger of two phases (:func:`compute_phases`): the **logits**,
  ``4 * ub * (n_vocab + 2 * n_embd)`` bytes (a float per token and word, and
  the last hidden states), and the **attention**, ``2 * ub * cells`` (flash
  attention's f16 mask over one stream's cells; with ``-fa off``, the f32
  scores of every head and the mask: ``4 * ub * cells * (n_head + 1)``) plus
  ``32 * ub * n_embd`` of activations. Checked against llama.cpp's own
  ``CPU compute buffer size`` on real loads (``docs/cluster.md``).
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
from service.core.launch import InferenceLaunch, Params
from service.core.node_state import ModelShape

Options = Mapping[str, str]
"""llama-server's options by key, as written (a model's ``args``)."""

WORKER_OVERHEAD = 64 * 1024 * 1024
"""An inference worker's own resident memory before any model: Python, llama.cpp, numpy (measured ~55 MB)."""
DEFAULT_N_CTX = 4096  # the worker's --n-ctx default
DEFAULT_N_PARALLEL = 4  # the worker's slots with --n-parallel auto (-1, its default)
DEFAULT_N_BATCH = 2048  # the worker's --n-batch default (llama-server's)
MAX_SLOTS = 256  # the worker's cap on slots (llama.cpp's LLAMA_MAX_SEQ)
KV_PAD = 256  # llama.cpp pads each KV stream to a multiple of this many cells
MAX_UBATCH = 512  # the worker's micro-batch: min(n_batch, -ub), -ub 512 by default
CACHE_TYPE_BYTES = {
    "f32": 4.0,
    "f16": 2.0,
    "bf16": 2.0,
    "q8_0": 34 / 32,
    "q5_0": 22 / 32,
    "q5_1": 24 / 32,
    "q4_0": 18 / 32,
    "q4_1": 20 / 32,
    "iq4_nl": 18 / 32,
}
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

    def to_json(self) -> dict[str, JSON]:  # a JSON document: the API's
        """The API's ``memory`` object."""
        return {
            "total_bytes": self.total,
            "weights_bytes": self.weights,
            "kv_cache_bytes": self.kv_cache,
            "compute_bytes": self.compute,
            "overhead_bytes": self.overhead,
        }


def launch_of(params: InferenceLaunch | Params) -> InferenceLaunch:
    return params if isinstance(params, InferenceLaunch) else InferenceLaunch.from_params(params)


def _positive(value: int, default: int) -> int:
    return value if value > 0 else default


def _pad(cells: int) -> int:
    return -(-max(cells, 1) // KV_PAD) * KV_PAD


@dataclass(frozen=True, slots=True)
class KvLayout:
    """The KV cache the worker's context allocates: ``streams`` of ``cells`` (full-attention layers)
    and ``swa_cells`` (sliding-window layers) each."""

    streams: int
    cells: int
    swa_cells: int


def slots(params: InferenceLaunch | Params) -> int:
    """The worker's slots: ``n_parallel`` (-1 or unset: 4, at most 256); an embedding worker runs one."""
    launch = launch_of(params)
    if launch.embedding:
        return 1
    return min(_positive(launch.n_parallel, DEFAULT_N_PARALLEL), MAX_SLOTS)


def kv_layout(shape: ModelShape, params: InferenceLaunch | Params) -> KvLayout:
    """As the worker sizes its context (``workers/inference/llama/_load.py``), then llama.cpp pads it:
    ``-np`` auto or ``kv_unified``: one pool of ``n_ctx`` cells (0: the training context); else a
    stream per slot of ``n_ctx / n_parallel``, capped to the training context."""
    launch = launch_of(params)
    train = max(shape.n_ctx_train, 0)
    total = (train or DEFAULT_N_CTX) if launch.n_ctx <= 0 else launch.n_ctx
    n_seq = slots(launch)
    ubatch = min(_positive(launch.n_batch, DEFAULT_N_BATCH), _positive(launch.n_ubatch, MAX_UBATCH))
    full = shape.sliding_window <= 0 or launch.swa_full  # --swa-full: every cell, as other layers
    window = 1 << 40 if full else shape.sliding_window
    if launch.n_parallel <= 0 or launch.kv_unified:  # unset or -1: the worker's auto, one pool
        cells = _pad(total)
        return KvLayout(1, cells, min(cells, _pad(window * n_seq + ubatch)))
    cells = _pad(min(max(total // n_seq, 1), train or total))
    return KvLayout(n_seq, cells, min(cells, _pad(window + ubatch)))


def estimate(shape: ModelShape, params: InferenceLaunch | Params, args: Options | None = None) -> MemoryNeed:
    """The need of ``shape`` loaded with ``params`` (the worker's launch, or a model's parameters); the
    cache types are the launch's, or ``args``' (llama-server's options as written: ``cache-type-k``)."""
    launch, options = launch_of(params), args or {}
    bytes_k = CACHE_TYPE_BYTES.get(str(options.get("cache-type-k") or launch.cache_type_k).lower(), 2.0)
    bytes_v = CACHE_TYPE_BYTES.get(str(options.get("cache-type-v") or launch.cache_type_v).lower(), 2.0)
    kv_cells = kv_layout(shape, launch)
    per_cell = shape.n_head_kv * (shape.n_embd_head_k * bytes_k + shape.n_embd_head_v * bytes_v)
    swa = max(0, min(shape.swa_layers, shape.n_layer)) if shape.sliding_window > 0 else 0
    cells = (shape.n_layer - swa) * kv_cells.cells + swa * kv_cells.swa_cells
    kv = int(kv_cells.streams * cells * per_cell)
    return MemoryNeed(weights=shape.weights_bytes, kv_cache=kv, compute=max(compute_phases(shape, launch)))


def compute_phases(shape: ModelShape, params: InferenceLaunch | Params) -> tuple[int, int]:
    """The compute buffer's two peaks, ``(attention, logits)`` bytes, for the worst micro-batch (see
    the module doc): llama.cpp's graph allocator reuses memory between them, so a buffer holding both
    phases is their maximum; a device that holds only repeating layers needs the first, the one with
    the output layer the second too. Fitted to llama.cpp's ``compute buffer size`` on real loads
    (``tests/workers/inference/llama/test_memory_estimate.py``)."""
    launch = launch_of(params)
    layout = kv_layout(shape, launch)
    cells = layout.cells  # one stream's: the mask and the scores span the cells a sequence sees
    # llama.cpp caps the batch to the whole context (every stream's cells), then the micro-batch to it
    ubatch = min(_positive(launch.n_batch, DEFAULT_N_BATCH), _positive(launch.n_ubatch, MAX_UBATCH))
    ubatch = min(ubatch, layout.streams * cells)
    if launch.flash_attn == "off":  # the scores of every head, f32, and an f32 mask
        n_head = max(shape.n_embd // max(shape.n_embd_head_k, 1), shape.n_head_kv, 1)
        scores = 4 * ubatch * cells * (n_head + 1)
    else:  # flash attention (auto: on wherever the backend has it, every CPU): an f16 mask
        scores = 2 * ubatch * cells
    attention = scores + 32 * ubatch * shape.n_embd
    logits = 4 * ubatch * (shape.n_vocab + 2 * shape.n_embd)
    return attention, logits


def need_bytes(shape: ModelShape | None, params: InferenceLaunch | Params, args: Options | None = None) -> int:
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
