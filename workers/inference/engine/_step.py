"""One step's batch: which tokens go into a ``llama_decode``, and what becomes of its rows.

The generating slots' pending tokens go first, then prompt chunks in arrival order up to ``n_batch``
tokens (chunked prefill); after the decode each row with logits is sampled with its request's chain.
Kept apart from the step loop (:mod:`workers.inference.engine._batch`), which decides when a step runs
and which slots it holds, because this is the part that knows the batch's layout.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from workers.inference.engine._errors import EngineError, EngineFailed
from workers.inference.engine._kept_logits import logits_row
from workers.inference.engine._media import text_end
from workers.inference.engine._preempt import preempt
from workers.inference.engine._slots import Request, Slot, SlotState, shift_context
from workers.inference.engine._speculate import SpeculateMixin
from workers.inference.engine._tokens import TokenMixin

if TYPE_CHECKING:
    from workers.inference.engine._kept_logits import KeptLogits
    from workers.inference.engine._metrics import StepLog
    from workers.inference.engine._row_sampler import RowSampler
    from workers.inference.llama import Batch, LoraKey


class StepMixin(SpeculateMixin, TokenMixin):
    """The batch engine's filling of one batch and committing of its rows (on the engine thread)."""

    kept: KeptLogits
    sampler: RowSampler
    _budget: int
    _gen_cap: int  # generating slots per step while the KV cache cannot take them all (0: no cap)
    _gen_waiting: set[int]  # slots a capped step left out: first in the next one
    _drop_cache: Callable[[Slot], None]  # the prompt cache's (a declaration: PromptCacheMixin comes later)
    _debug: Callable[..., None]  # likewise
    _cv: threading.Condition
    step_log: StepLog
    _pending: deque[Request]

    def _fail(self, s: Slot, err: EngineError) -> None:
        raise NotImplementedError  # the engine's

    def _fill(self, batch: Batch, lora: LoraKey | None = None) -> tuple[list[Slot], list[tuple[Slot, list[int]]]]:
        """Generating slots' tokens first (each with its drafted tokens, when speculating), then prompt
        chunks in arrival order, up to ``n_batch`` (only the slots with adapter set ``lora`` unless it is None)."""
        assert self.llm is not None
        gen: list[Slot] = []
        now = time.monotonic()
        for s in self.slots:
            if s.state is not SlotState.GENERATING or (lora is not None and s.lora != lora):
                continue
            if len(s.cache) + 1 >= self.llm.n_ctx and not (self.context_shift and shift_context(self.llm, s)):
                s.truncated = True
                self._finish(s, "length", now)  # the context is full (--context-shift makes room instead)
                continue
            gen.append(s)
        gen.sort(key=lambda s: s.id not in self._gen_waiting)  # those left out last step first
        cap = self._gen_cap or len(gen)
        self._gen_waiting = {s.id for s in gen[cap:]}
        gen = gen[:cap]
        drafts: list[list[int]] = []
        for s in gen:  # room for every generating slot's token and the drafts before
            room = batch.capacity - batch.n - len(gen) - sum(map(len, drafts))
            drafts.append(self._draft_for(s, room, alone=len(gen) == 1))
        for s, draft in zip(gen, self._share_drafts(drafts), strict=True):
            s.draft = draft
            row = batch.add([s.pending, *s.draft], len(s.cache) + s.pos_delta, s.id, True, outputs=bool(s.draft))
            s.batch_index = row - len(s.draft)  # the first of its rows
        self._skip_drafts = False
        chunks: list[tuple[Slot, list[int]]] = []
        budget = min(self._budget, batch.capacity - batch.n)
        prefilling = [s for s in self.slots if s.state is SlotState.PROMPT and (lora is None or s.lora == lora)]
        for s in sorted(prefilling, key=lambda s: s.request.id if s.request else 0):
            if budget <= 0 or s.request is None:
                break
            prompt, done = s.request.feed, s.n_prompt_done
            part = prompt[done : text_end(s.request, done, budget)]
            if not part:
                continue  # an image comes next: decoded at the start of the next step
            last = done + len(part) == len(prompt)
            row = batch.add(part, done + s.pos_delta, s.id, last)
            s.batch_index = row if last else -1
            chunks.append((s, part))
            budget -= len(part)
        self._pad_to_tile(batch, gen, len(chunks))
        return gen, chunks

    def _commit(self, gen: list[Slot], chunks: list[tuple[Slot, list[int]]], now: float) -> None:
        assert self.llm is not None
        for s in gen:
            s.cache.append(s.pending)
        for s, part in chunks:
            s.cache.extend(part)
            s.n_prompt_done += len(part)
            if s.request is not None and s.request.resume is None:  # a resumed reply's timings stand
                s.timings.on_prompt(len(part), now)
                s.report_progress(now)
            if s.batch_index >= 0:
                s.state = SlotState.GENERATING
        ctx, kept = self.llm.ctx, self.kept
        drafted = [(s, s.draft, s.batch_index) for s in gen if s.draft]
        rows = [
            s
            for s in self.slots
            if s.batch_index >= 0 and s.state is SlotState.GENERATING and s.chain is not None and not s.draft
        ]
        forced = {s.id: t for s in rows if (t := _forced(s)) is not None}  # a reasoning being ended
        post = {s.id for s in rows if s.id not in forced and _post_sampling(s)}  # sampled here, candidates kept
        jobs = [(s.chain, s.batch_index, s.request.greedy if s.request else None) for s in rows]
        direct = [j for s, j in zip(rows, jobs, strict=True) if s.id not in forced and s.id not in post]
        sampled, probs = iter(self.sampler.sample(ctx, direct)), {}
        tokens = []
        for s in rows:
            if s.id in forced and s.request is not None and not s.request.params.grammar:
                # The chain takes it as its choice (penalties); not a grammar's, which throws (abort) on a
                # token it does not allow: it goes on from what it accepted, the forced tag beside it.
                self.llm.lc.llama_sampler_accept(s.chain, forced[s.id])
            if s.id in post and s.request is not None:
                row = logits_row(self.llm.lc, ctx, s.batch_index, self.llm.n_vocab)
                token, probs[s.id] = kept.sample_post(s.chain, row, s.request.params.n_probs)
                tokens.append(token)
                continue
            tokens.append(forced[s.id] if s.id in forced else next(sampled))
        for s, (_, index, _), token in zip(rows, jobs, tokens, strict=True):
            self._on_token(s, token, now, probs=probs.get(s.id))
            if not s.is_processing:  # it ended here: keep the logits after what the slot holds
                kept.keep(s.id, ctx, index, s.cache)
        for s, draft, first_row in drafted:
            s.draft = []
            self._verify(s, draft, first_row, now)
        for s in self.slots:
            s.batch_index = -1

    def _decode_failed(self, ret: int, gen: list[Slot], chunks: list[tuple[Slot, list[int]]]) -> None:
        """As llama-server's ``decode`` when ``llama_decode`` finds no room in the KV cache (``1``): with
        one KV pool an idle slot's cells go first; else the batch is halved (prompt chunks, then the
        generating slots) down to one token. When one token finds no room, llama-server ends every
        running request with a 500 "Context size has been exceeded."; here a request is preempted
        instead (:meth:`_make_room`). Any other error fails the batch's requests."""
        assert self.llm is not None
        for s in self.slots:
            s.batch_index = -1
            if s.draft:  # the step is taken again without them
                s.draft = []
                self._skip_drafts = True
        if ret == 1:
            if self._clear_an_idle_slot():
                return
            if chunks and self._budget > 1:
                self._budget //= 2  # restored after the next successful step, as _gen_cap
            elif chunks and gen:
                self._budget = 0  # the generating slots' tokens alone
            elif len(gen) > 1:
                self._gen_cap = len(gen) // 2
            else:
                self._make_room(gen or [c[0] for c in chunks])
                self._budget, self._gen_cap = self.llm.cfg.n_batch, 0  # the whole batch again, with more room
            return
        err = EngineFailed(f"llama_decode failed ({ret})")
        for s in {s.id: s for s in (*gen, *(c[0] for c in chunks))}.values():  # each slot once
            self._fail(s, err)

    def _make_room(self, stuck: list[Slot]) -> None:
        """Not one token of ``stuck`` (the batch's one slot) finds a KV cell. With one pool and several
        running requests, the youngest gives its slot back and waits to go on (:mod:`._preempt`);
        else the slot fills its cells alone: its context end, as :meth:`_fill` ends it."""
        assert self.llm is not None
        now = time.monotonic()
        running = [s for s in self.slots if s.is_processing and s.request is not None]
        if not (self.llm.cfg.kv_unified and len(running) > 1):
            for s in stuck[:1]:
                s.truncated = True
                self._finish(s, "length", now)
            return
        victim = max(running, key=lambda s: s.request.id if s.request else 0)
        n_held = len(victim.cache)
        with self._cv:
            req = preempt(victim, now)
            self._pending.appendleft(req)  # the head of the queue: admitted first once it fits again
        self.step_log.ended(req.id)
        self._drop_cache(victim)
        self.metrics.on_preempt()
        self._debug(f"the KV pool is full: task {req.id} preempted, {n_held} cells freed, it resumes later", victim)

    def _clear_an_idle_slot(self) -> bool:
        """llama-server's ``try_clear_idle_slots``: with one KV pool, the cells of one idle slot that
        holds some are freed for the running ones; whether there was one."""
        assert self.llm is not None
        if not self.llm.cfg.kv_unified:
            return False  # a slot's own stream: its cells are no use to the others
        idle = next((s for s in self.slots if not s.is_processing and s.cache), None)
        if idle is not None:
            self._drop_cache(idle)
        return idle is not None


def _post_sampling(s: Slot) -> bool:
    """Whether the slot's request asks for llama-server's ``post_sampling_probs`` (with ``n_probs``)."""
    return s.request is not None and s.request.params.post_sampling_probs and s.request.params.n_probs >= 0


def _forced(s: Slot) -> int | None:
    """The token a slot's request must take in place of sampling (its reasoning being ended), or None."""
    req = s.request
    return req.reasoning.forced_token() if req is not None and req.reasoning is not None else None
