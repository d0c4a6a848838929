"""Embeddings and rerank scores on the batch engine: one decode per step over whole sequences.

Why whole sequences: an encoder (BERT) attends in both directions and keeps no
KV cache, so llama.cpp needs every token of a sequence in one micro-batch, and
a pooled vector (``mean``, ``cls``, ``last``, ``rank``) is read per sequence
once it has been decoded (``llama_get_embeddings_seq``). Each step the lane
takes queued requests in order while their tokens fit in ``n_ubatch`` and a
sequence id is free, decodes them together (every row an output, as
llama-server sets them), reads one vector per sequence (or one per token
with pooling ``none``), normalises it and frees the sequence at once: nothing
of an embedding request outlives its step.

Where the sequences live: an ``--embedding`` worker's one context (the
engine's slots lend their sequence ids for the step, and llama.cpp switches
the context between embeddings and logits per decode, as llama-server does);
any other model gets a second context on the same weights, made on the first
embedding request (:meth:`~workers.inference.llama.LlamaModel.embedding_context`).
"""

from __future__ import annotations

import itertools
import math
import queue
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from workers.inference.engine._errors import EngineFailed, EngineNotReady, RequestCancelled
from workers.inference.engine._slots import Slot, SlotState
from workers.inference.llama import POOLING, Batch

if TYPE_CHECKING:
    from workers.inference.engine._metrics import EngineMetrics
    from workers.inference.llama import LlamaModel

_ids = itertools.count(1)


@dataclass
class EmbedRequest:
    """One sequence to embed (or to score, with rank pooling); built on an HTTP thread.

    ``out`` receives exactly one ``("d", vectors, n_tokens)`` (``vectors``: one pooled
    vector, or one per token with pooling ``none``) or ``("e", EngineError)``.
    """

    tokens: list[int]
    normalize: int = 2  # llama-server's embd_normalize: -1 none, 0 max-abs (int16), 2 euclidean, p > 2 p-norm
    id: int = field(default_factory=lambda: next(_ids))
    out: queue.SimpleQueue[tuple[Any, ...]] = field(default_factory=queue.SimpleQueue)
    cancelled: threading.Event = field(default_factory=threading.Event)


def normalize(vec: Any, norm: int) -> Any:
    """``common_embd_normalize`` over a float32 numpy vector, in its arithmetic: float products and
    a sequential double sum, the scale rounded to float, float results. The vector is llama-server's
    to the bit (a float64 pass differed in the last bit of ~1 value in 5)."""
    import numpy as np

    v = np.asarray(vec, dtype=np.float32)
    if norm < 0:
        total = 1.0
    elif norm == 0:
        total = float(np.fmax.reduce(np.abs(v), initial=0.0)) / 32760.0  # fmax: NaN ignored, as C's `<`
    elif norm == 2:
        total = math.sqrt(_sequential_sum(np, v * v))
    else:
        total = _sequential_sum(np, np.abs(v).astype(np.float64) ** norm) ** (1.0 / norm)
    scale = np.float32(1.0 / total) if total > 0.0 else np.float32(0.0)
    return v * scale


def _sequential_sum(np: Any, values: Any) -> float:
    """``sum += x`` over ``values`` in double, in order (numpy's ``sum`` adds pairwise)."""
    return float(np.cumsum(values, dtype=np.float64)[-1]) if len(values) else 0.0


class EmbeddingLane:
    """The embedding requests of one engine and the context that computes them (module docstring)."""

    @classmethod
    def open(cls, llm: LlamaModel, shared_slots: list[Slot] | None) -> EmbeddingLane:
        """The lane of an engine: on its own context with ``shared_slots`` (``--embedding``), else
        on a second context made now (raises ``RuntimeError`` if it cannot be made)."""
        return cls(llm if shared_slots is not None else llm.embedding_context(), shared_slots)

    def __init__(self, llm: LlamaModel, shared_slots: list[Slot] | None) -> None:
        self.llm = llm
        self.pooling = llm.pooling
        self.shared_slots = shared_slots  # the engine's slots when this is the engine's own context
        self.n_seq = len(shared_slots) if shared_slots is not None else max(1, llm.cfg.n_parallel)
        self.max_tokens = min(llm.n_ubatch, llm.n_ctx)
        self.batch = Batch(llm.lc, llm.n_ubatch)
        self.pending: deque[EmbedRequest] = deque()

    def step(self, now: float, metrics: EngineMetrics) -> int:
        """Decode the next requests that fit together; returns how many were answered. Their tokens
        count as prompt tokens processed and the decode as one, as llama-server counts an embedding's."""
        taken = self._take(now)
        if not taken:
            return 0
        llm, batch = self.llm, self.batch
        batch.n = 0
        rows: list[tuple[EmbedRequest, int, int]] = []  # request, sequence id, first row
        for req, seq in taken:
            llm.seq_rm(seq, 0, -1)
            rows.append((req, seq, batch.n))
            batch.add(req.tokens, 0, seq, True, outputs=True)
        llm.set_embeddings(True)
        t_decode = time.monotonic()
        ret = batch.decode(llm.ctx)
        try:
            if ret != 0:
                for req, _seq, _row in rows:
                    req.out.put(("e", EngineFailed(f"llama_decode failed ({ret}) computing embeddings")))
                return len(rows)
            answers = [(req, self._vectors(req, seq, row)) for req, seq, row in rows]  # reading them syncs
            metrics.on_prompt(batch.n, time.monotonic() - t_decode)
            metrics.on_decode(len(rows), max(len(req.tokens) for req, _seq, _row in rows))
            for req, vectors in answers:
                req.out.put(("d", vectors, len(req.tokens)))
        finally:
            for _req, seq, _row in rows:
                llm.seq_rm(seq, 0, -1)
        return len(rows)

    def _take(self, now: float) -> list[tuple[EmbedRequest, int]]:
        """Queued requests, in order, while their tokens fit in one micro-batch and sequences are free."""
        seqs = self._free_seqs(now)
        taken: list[tuple[EmbedRequest, int]] = []
        budget = self.llm.n_ubatch
        while self.pending and seqs:
            req = self.pending[0]
            if req.cancelled.is_set():
                self.pending.popleft().out.put(("e", RequestCancelled("request cancelled")))
                continue
            if len(req.tokens) > budget:
                break  # next step (a request never exceeds n_ubatch: the front checks)
            budget -= len(req.tokens)
            taken.append((self.pending.popleft(), seqs.pop(0)))
        return taken

    def _free_seqs(self, now: float) -> list[int]:
        if self.shared_slots is None:
            return list(range(self.n_seq))
        idle = [s for s in self.shared_slots if s.state is SlotState.IDLE]
        idle.sort(key=lambda s: (bool(s.cache), s.last_used))  # keep cached conversations longest
        for s in idle:
            s.cache.clear()  # its cells are dropped for the embedding
            s.last_used = now
        return [s.id for s in idle]

    def _vectors(self, req: EmbedRequest, seq: int, row: int) -> list[list[float]]:
        lc, ctx, n = self.llm.lc, self.llm.ctx, self.llm.n_embd_out
        if self.pooling == POOLING["none"]:  # llama-server normalises only pooled vectors
            return [_floats(lc.llama_get_embeddings_ith(ctx, i), n) for i in range(row, row + len(req.tokens))]
        ptr = lc.llama_get_embeddings_seq(ctx, seq)
        if self.pooling == POOLING["rank"]:
            return [_floats(ptr, max(1, int(lc.llama_model_n_cls_out(self.llm.model))))]
        if not ptr:
            return [[0.0] * n]
        import numpy as np

        return [normalize(np.ctypeslib.as_array(ptr, shape=(n,)), req.normalize).tolist()]


def _floats(ptr: Any, n: int) -> list[float]:
    """``n`` floats from llama.cpp's ``float *`` (zeros for a null one)."""
    return ptr[:n] if ptr else [0.0] * n


def wait_all(reqs: Sequence[EmbedRequest], gone: Any, poll_s: float = 0.05) -> list[tuple[list[list[float]], int]]:
    """Each request's ``(vectors, n_tokens)``, in order; raises the first error. ``gone()`` True
    (the client hung up) cancels the rest."""
    results: list[tuple[list[list[float]], int]] = []
    for req in reqs:
        while True:
            try:
                item = req.out.get(timeout=poll_s)
                break
            except queue.Empty:
                if gone is not None and gone():
                    for r in reqs:
                        r.cancelled.set()
                    raise RequestCancelled("client disconnected") from None
        if item[0] == "e":
            for r in reqs:
                r.cancelled.set()
            raise item[1]
        results.append((item[1], item[2]))
    return results


class EmbeddingMixin:
    """The batch engine's embedding side: the queue HTTP threads fill, and the step that drains it."""

    llm: LlamaModel | None
    slots: list[Slot]
    embedding_enabled: bool
    _cv: threading.Condition
    _idle: threading.Event
    _accepting: bool
    _embeds: deque[EmbedRequest]
    _lane: EmbeddingLane | None
    metrics: EngineMetrics

    def enqueue_embedding(self, reqs: list[EmbedRequest]) -> None:
        """Queue sequences to embed (or score) at the next steps, in order."""
        with self._cv:
            if not self._accepting:
                raise EngineNotReady()
            self._embeds.extend(reqs)
            self._idle.clear()
            self._cv.notify()

    @property
    def embedding_batch_limit(self) -> int:
        """The most tokens one embedding sequence may have (one micro-batch, one slot's context)."""
        llm = self.llm
        assert llm is not None
        if self.embedding_enabled:
            return min(llm.n_ubatch, llm.n_ctx)
        return max(llm.cfg.n_batch, llm.cfg.n_parallel)

    def _embed_step(self, now: float) -> None:
        """Hand queued requests to the lane (made on first use) and let it decode the next group."""
        assert self.llm is not None
        with self._cv:
            queued, self._embeds = list(self._embeds), deque()
        if self._lane is None:
            try:
                self._lane = EmbeddingLane.open(self.llm, self.slots if self.embedding_enabled else None)
            except RuntimeError as exc:
                for req in queued:
                    req.out.put(("e", EngineFailed(str(exc))))
                return
        self._lane.pending.extend(queued)
        self._lane.step(now, self.metrics)
