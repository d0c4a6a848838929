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

Thread safety on llama.cpp's side: the first read of a decode's logits may
reorder its output rows (``llama_context::output_reorder``), so that read is
done here, on the calling thread, before any other thread reads a row; after
it, reading rows, the model and the vocabulary is read-only.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

Job = tuple[Any, int]  # a request's sampler chain, and its row in the decoded batch


class RowSampler:
    """``llama_sampler_sample`` for a step's rows, on up to ``threads`` threads (the caller's among them)."""

    def __init__(self, lc: Any, threads: int) -> None:
        self._lc = lc
        self._threads = max(1, threads)
        self._pool: ThreadPoolExecutor | None = None  # made at the first step with two rows or more

    def sample(self, ctx: Any, jobs: list[Job]) -> list[int]:
        """Each job's token, in order: what ``llama_sampler_sample(chain, ctx, row)`` gives for each."""
        n_groups = min(self._threads, len(jobs))
        if n_groups < 2:
            return self._run(ctx, jobs)
        self._lc.llama_get_logits_ith(ctx, jobs[0][1])  # settles the row order before other threads read
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self._threads - 1, thread_name_prefix="sampling")
        groups = [jobs[g::n_groups] for g in range(n_groups)]  # strided: neighbours cost alike
        pending: list[Future[list[int]]] = [self._pool.submit(self._run, ctx, group) for group in groups[1:]]
        results = [self._run(ctx, groups[0]), *(f.result() for f in pending)]
        tokens = [0] * len(jobs)
        for g, found in enumerate(results):
            tokens[g::n_groups] = found
        return tokens

    def _run(self, ctx: Any, jobs: list[Job]) -> list[int]:
        sample = self._lc.llama_sampler_sample
        return [int(sample(chain, ctx, row)) for chain, row in jobs]

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False)
            self._pool = None
