"""Loading a model and its shared context for the batch engine: classified failures, a warm-up.

A load reports progress (returning False from ``on_progress`` aborts it), and
a failure is explained: a stop request, a structural defect found by the GGUF
check, or llama.cpp's own words (:func:`~workers.inference.llama._log.classify_llama_errors`).
:class:`Loaded` is what either way of loading returns (this one, or
:func:`~workers.inference.llama._legacy_load.load_model` for ``llama_cpp.Llama``).
"""

from __future__ import annotations

import ctypes
import itertools
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from service.core.devices import Offload
from workers.inference.llama._bindings import lowlevel
from workers.inference.llama._log import LlamaLog, LoadError, classify_llama_errors
from workers.inference.llama._model import MAX_SLOTS, ContextConfig, LlamaModel
from workers.inference.llama._offload import (
    JsonValue,
    Placement,
    apply_placement,
    context_params_used,
    model_params_used,
)


def _progress_callback(lc: Any, on_progress: Callable[[float], bool]) -> Any:
    @lc.llama_progress_callback  # type: ignore[untyped-decorator]  # ctypes CFUNCTYPE factories have no stubs
    def _progress(progress: float, _user_data: ctypes.c_void_p) -> bool:
        try:
            return bool(on_progress(float(progress)))
        except Exception:  # never let a Python error unwind through C
            return True

    return _progress


def _classify(path: str, log: LlamaLog, aborted: bool) -> LoadError:
    """Why the load failed: a stop request, a structural defect, or llama.cpp's own words.

    The GGUF header walk runs only after a failure: it imports the ``gguf``
    package (with numpy, ~60 ms) that a good load does not need.
    """
    if aborted:
        return LoadError("aborted", "load aborted by a stop request")
    from workers.inference.llama._gguf_check import GGUFCheckError, inspect_gguf

    try:
        inspect_gguf(path)
    except GGUFCheckError as exc:
        return LoadError(exc.reason, exc.message)
    return classify_llama_errors(log.errors())


def _context_params(lc: Any, cfg: ContextConfig, n_ctx_train: int) -> Any:
    """llama-server's context: ``-c`` cells in all, one KV stream of ``n_ctx / n_parallel`` cells
    per slot, or with ``kv_unified`` one pool any slot may fill.

    A sequence alone in its stream keeps its cells in position order, so its
    attention sums in the same order whatever the other slots do, and greedy
    output equals the same request run alone. In one unified pool (the worker's
    ``-np`` auto, as llama-server's), cells freed by a finished or cancelled
    request are refilled out of order and results drift in the last bits; the
    pool lets one long conversation use the cells idle slots do not need.
    """
    # service/core/memory.kv_layout reproduces this sizing for placement: change both together.
    p = lc.llama_context_default_params()
    n_seq = min(max(1, cfg.n_parallel), MAX_SLOTS)
    total = n_ctx_train if cfg.n_ctx <= 0 else cfg.n_ctx
    # Each slot's share is capped at the training context, as llama-server caps n_ctx_slot.
    p.n_ctx = total if cfg.kv_unified else min(max(total // n_seq, 1), n_ctx_train or total) * n_seq
    # A step carries one token per generating slot even when n_batch is smaller.
    p.n_batch = max(cfg.n_batch, n_seq)
    p.n_ubatch = min(p.n_batch, max(cfg.n_ubatch, 1))
    if cfg.embedding:  # a whole sequence in one micro-batch: llama-server sets n_batch = n_ubatch
        p.n_batch = p.n_ubatch = max(p.n_ubatch, n_seq)
    p.n_seq_max = n_seq
    p.n_threads = cfg.n_threads
    p.n_threads_batch = cfg.n_threads_batch
    p.kv_unified = cfg.kv_unified
    p.embeddings = cfg.embedding
    if cfg.pooling >= 0:
        p.pooling_type = cfg.pooling
    # Sliding-window layers keep only their window (Gemma 3: 512 of 4096 per slot) unless --swa-full;
    # prefix reuse checks that the window it needs is still cached.
    p.swa_full = cfg.swa_full
    p.flash_attn_type, p.type_k, p.type_v = cfg.flash_attn, cfg.type_k, cfg.type_v
    for name, value in cfg.rope:
        setattr(p, name, value)
    p.no_perf = True
    return p


class Loaded(Protocol):
    """A loaded model, however it was loaded: what ``instance_ready`` reports, and the
    model its engine runs (``llm``); ``phases`` are milliseconds per load step, if measured."""

    @property
    def llm(self) -> Any: ...
    @property
    def load_ms(self) -> float: ...
    @property
    def n_ctx(self) -> int: ...
    @property
    def n_params(self) -> int: ...
    @property
    def file_size(self) -> int: ...
    @property
    def architecture(self) -> str: ...
    @property
    def phases(self) -> dict[str, float]: ...
    @property
    def n_layer(self) -> int: ...
    @property
    def used(self) -> dict[str, JsonValue]: ...
    @property
    def offload(self) -> Offload: ...


@dataclass(frozen=True)
class LoadedLlama:
    """A loaded model plus what ``instance_ready`` reports; ``phases`` are milliseconds per step."""

    llm: LlamaModel
    load_ms: float
    phases: dict[str, float]
    used: dict[str, JsonValue]  # the llama_model_params and llama_context_params offload fields it loaded with
    offload: Offload = field(default_factory=Offload)  # instance_ready.offload, from the load log

    @property
    def n_layer(self) -> int:
        return int(self.llm.lc.llama_model_n_layer(self.llm.model))

    @property
    def n_ctx(self) -> int:
        return self.llm.n_ctx

    @property
    def n_params(self) -> int:
        return self.llm.n_params

    @property
    def file_size(self) -> int:
        return os.path.getsize(self.llm.path)

    @property
    def architecture(self) -> str:
        return self.llm.architecture


def load_llama(path: str, cfg: ContextConfig, *, log: LlamaLog, on_progress: Callable[[float], bool]) -> LoadedLlama:
    """Load ``path`` and create its context; raises :class:`LoadError` with a classified reason."""
    marks = [time.monotonic()]
    if not os.path.exists(path):
        raise LoadError("file_missing", f"no such file: {path}")
    lc = lowlevel()
    lc.llama_backend_init()
    marks.append(time.monotonic())
    model, used = _load_model(lc, path, log, on_progress, cfg.model, cfg.placement)
    marks.append(time.monotonic())
    cparams = _context_params(lc, cfg, int(lc.llama_model_n_ctx_train(model)))
    used.update(context_params_used(cparams))
    ctx = lc.llama_init_from_model(model, cparams)
    if not ctx:
        lc.llama_model_free(model)
        err = classify_llama_errors(log.errors())
        raise LoadError(err.reason if err.reason != "load_error" else "out_of_memory", err.message)
    marks.append(time.monotonic())
    llm = LlamaModel(lc, model, ctx, cfg, path)
    marks.append(time.monotonic())
    if cfg.warmup:
        _warmup(llm)
    marks.append(time.monotonic())
    on_progress(1.0)
    names = ("bindings_ms", "model_ms", "context_ms", "vocab_ms", "warmup_ms")
    phases = {name: round((b - a) * 1000.0, 3) for name, (a, b) in zip(names, itertools.pairwise(marks), strict=True)}
    return LoadedLlama(llm, round((marks[-1] - marks[0]) * 1000.0, 3), phases, used)


def model_params(lc: Any, fields: tuple[tuple[str, int], ...]) -> Any:
    """llama.cpp's default model parameters with ``fields`` set (``--load-mode``, ``--no-repack``...)."""
    params = lc.llama_model_default_params()
    for name, value in fields:
        setattr(params, name, value)
    return params


def _load_model(
    lc: Any,
    path: str,
    log: LlamaLog,
    on_progress: Callable[[float], bool],
    fields: tuple[tuple[str, int], ...] = (),
    placement: Placement | None = None,
) -> tuple[Any, dict[str, JsonValue]]:
    """``llama_model_load_from_file`` with our progress callback (returning False aborts the load);
    returns the model and the offload fields it was loaded with."""
    aborted = threading.Event()

    def progress(p: float) -> bool:
        keep = on_progress(p)
        if not keep:
            aborted.set()
        return keep

    params = model_params(lc, fields)
    placement = placement or Placement()
    arrays = apply_placement(lc, params, placement)  # -ts, -dev: C arrays params points at
    used = model_params_used(lc, params, placement)
    params.progress_callback = keepalive = _progress_callback(lc, progress)
    log.mark()
    model = lc.llama_model_load_from_file(path.encode(), params)
    del keepalive, arrays  # referenced until here: llama.cpp reads them only while loading
    if not model:
        raise _classify(path, log, aborted.is_set())
    return model, used


def _warmup(llm: LlamaModel) -> None:
    """Decode one token and forget it, as llama-server does before it reports ready.

    Why: the first ``llama_decode`` allocates the compute graph and faults in
    the weights; without this the first request's time to first token pays
    it (~40 ms on Gemma 3 270M).
    """
    lc = llm.lc
    token = llm.bos if llm.bos >= 0 else 0
    batch = lc.llama_batch_get_one((lc.llama_token * 1)(token), 1)
    lc.llama_decode(llm.ctx, batch)
    lc.llama_synchronize(llm.ctx)
    if llm.mem:  # encoders keep no KV cache
        lc.llama_memory_clear(llm.mem, True)
