"""Sampling a step's rows on several threads at once.

After a ``llama_decode`` of several generating slots, each row's token comes
from ``llama_sampler_sample`` with that request's own chain: it fills a
candidate array of the whole vocabulary (262,144 entries for Gemma 3) and
runs the chain over it, ~0.5 ms a row on this VM's cores. llama-server does
the rows one after another while its compute threads wait; here they are
shared out over the worker's compute threads (``--threads``), idle at that
moment anyway: ctypes releases the GIL for each call, and the chains are
independent (each has its own candidate buffer, RNG and state), so every row
gets the token it would get alone (``tests/workers/inference/engine/test_row_sampler.py``).

A chain of the greedy sampler alone, after a logit bias or not (temperature 0,
no penalty or grammar: ``_sampling.greedy_pick``), picks the row's first
largest logit and keeps no state, so its row is read in place with numpy's
``argmax`` instead: ~0.1 ms against ~0.5 ms for filling and scanning the
candidate array. That matters most for speculative
decoding, where one slot's step has up to 49 rows to verify (engine._speculate).

Thread safety on llama.cpp's side: the first read of a decode's logits may
reorder its output rows (``llama_context::output_reorder``), so that read is
done here, on the calling thread, before any other thread reads a row; after
it, reading rows, the model and the vocabulary is read-only.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from workers.inference.engine._kept_logits import logits_row

if TYPE_CHECKING:
    from workers.inference.engine._sampling import GreedyPick

Job = tuple[Any, int, "GreedyPick | None"]  # a request's sampler chain, its row, its greedy pick (or None)


class RowSampler:
    """``llama_sampler_sample`` for a step's rows, on up to ``threads`` threads (the caller's among them)."""

    def __init__(self, lc: Any, threads: int, n_vocab: int) -> None:
        self._lc = lc
        self._threads = max(1, threads)
        self._n_vocab = n_vocab
        self._pool: ThreadPoolExecutor | None = None  # made at the first step with two rows or more
        self._scratch: Any = None  # a row's logits plus its biases (the calling thread's alone)

    def sample(self, ctx: Any, jobs: list[Job]) -> list[int]:
        """Each job's token, in order: what ``llama_sampler_sample(chain, ctx, row)`` gives for each."""
        if not jobs:
            return []
        self._lc.llama_get_logits_ith(ctx, jobs[0][1])  # settles the row order before other threads read
        tokens = [self.pick(ctx, row, greedy) if greedy is not None else -1 for _, row, greedy in jobs]
        chained = [k for k, token in enumerate(tokens) if token < 0]
        found = self._sample_chains(ctx, [(jobs[k][0], jobs[k][1]) for k in chained])
        for k, token in zip(chained, found, strict=True):
            tokens[k] = token
        return tokens

    def sample_one(self, ctx: Any, chain: Any, row: int, greedy: GreedyPick | None) -> int:
        """One row's token, as ``llama_sampler_sample(chain, ctx, row)`` (on the calling thread)."""
        if greedy is not None:
            return self.pick(ctx, row, greedy)
        return int(self._lc.llama_sampler_sample(chain, ctx, row))

    def pick(self, ctx: Any, row: int, greedy: GreedyPick) -> int:
        """The first largest logit of ``row`` after ``greedy``'s biases, read in place (calling thread)."""
        import numpy as np

        logits = logits_row(self._lc, ctx, row, self._n_vocab)
        if not greedy.tokens:
            return int(logits.argmax())
        if self._scratch is None:
            self._scratch = np.empty(self._n_vocab, dtype=np.float32)
        np.copyto(self._scratch, logits)
        # float32 adds in the bias list's order, each entry once (llama.cpp's logit-bias sampler)
        np.add.at(self._scratch, np.asarray(greedy.tokens), np.asarray(greedy.biases, dtype=np.float32))
        return int(self._scratch.argmax())

    def _sample_chains(self, ctx: Any, jobs: list[tuple[Any, int]]) -> list[int]:
        n_groups = min(self._threads, len(jobs))
        if n_groups < 2:
            return self._run(ctx, jobs)
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self._threads - 1, thread_name_prefix="sampling")
        groups = [jobs[g::n_groups] for g in range(n_groups)]  # strided: neighbours cost alike
        pending: list[Future[list[int]]] = [self._pool.submit(self._run, ctx, group) for group in groups[1:]]
        results = [self._run(ctx, groups[0]), *(f.result() for f in pending)]
        tokens = [0] * len(jobs)
        for g, found in enumerate(results):
            tokens[g::n_groups] = found
        return tokens

    def _run(self, ctx: Any, jobs: list[tuple[Any, int]]) -> list[int]:
        sample = self._lc.llama_sampler_sample
        return [int(sample(chain, ctx, row)) for chain, row in jobs]

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False)
            self._pool = None
