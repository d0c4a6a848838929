"""Admission: which idle slot a queued request takes, and which of the slot's cached tokens it keeps.

Each step, before the batch is built, queued requests go in arrival order to
idle slots (:func:`~workers.inference.engine._slots.pick_slot`: the longest
shared prefix, else the least recently used slot; or the slot the request
names with llama-server's ``id_slot``). A request whose named slot is busy
waits for it while later requests go ahead, as llama-server defers such a
task. The prompt cache then gets its say (:mod:`~workers.inference.engine._prompt_cache`),
and the request starts with the prefix it can reuse.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import TYPE_CHECKING

from workers.inference.engine._errors import EngineError, RequestCancelled
from workers.inference.engine._media import keep_whole_media, pos_delta
from workers.inference.engine._preempt import fits_again
from workers.inference.engine._prompt_cache import PromptCacheMixin
from workers.inference.engine._slots import Request, Slot, SlotState, holds_media, pick_slot, reusable_chunks
from workers.inference.engine._tokens import TokenMixin

if TYPE_CHECKING:
    from collections.abc import Callable

    from workers.inference.engine._metrics import EngineMetrics


class AdmissionMixin(TokenMixin, PromptCacheMixin):
    """The batch engine's admission of queued requests (on the engine thread)."""

    metrics: EngineMetrics
    _cv: threading.Condition
    _pending: deque[Request]
    _restore_for: Callable[[list[int]], None]  # the disk cache's (a declaration: DiskCacheMixin comes later)

    def _reject(self, req: Request, err: EngineError) -> None:
        raise NotImplementedError  # the engine's

    def _admit(self, now: float) -> None:
        assert self.llm is not None
        with self._cv:
            waiting: list[Request] = []  # they named a slot that is busy
            while self._pending:
                req = self._pending.popleft()
                if req.cancelled.is_set():
                    self._reject(req, RequestCancelled("request cancelled"))
                    continue
                if not fits_again(req, self.slots, self.llm.n_ctx_total):  # preempted: it waits for room, and so
                    self._pending.appendleft(req)  # do those behind it (first come, first served)
                    break
                lora = self.llm.lora.key if req.lora is None else req.lora  # None: the worker's own set
                prompt = req.feed if req.cache_prompt else []
                picked = pick_slot(self.slots, prompt, lora=lora, id_slot=req.id_slot)
                if picked is None and req.id_slot >= 0:
                    waiting.append(req)
                    continue
                if picked is None:  # no slot is idle: nobody else can start either
                    self._pending.appendleft(req)
                    break
                slot, n_common = picked
                self._restore_for(prompt)  # saved prompt-cache files waiting for their first use (_disk_cache)
                n_common = self._swap_prompt(slot, prompt, lora, n_common)
                if req.cache_prompt and req.n_cache_reuse > 0:
                    n_common = self._reuse_chunks(slot, req, n_common)
                self._launch(slot, req, n_common if req.cache_prompt else 0, now)
                self._stash_idle_slots(slot)
            self._pending.extendleft(reversed(waiting))  # first in the queue again, in their order

    def _reuse_chunks(self, slot: Slot, req: Request, n_common: int) -> int:
        """llama-server's ``n_cache_reuse``: shift the cached runs the prompt has next into place (their KV
        positions move, RoPE follows); the prefix now reusable. Not where the cache cannot shift (SWA,
        M-RoPE) or images are involved, as llama-server."""
        llm = self.llm
        assert llm is not None
        if req.media is not None or holds_media(slot) or not llm.mem or not llm.lc.llama_memory_can_shift(llm.mem):
            return n_common
        moves = reusable_chunks(slot.cache, req.feed, n_common, req.n_cache_reuse)
        if not moves:
            return n_common
        for head_c, head_p, n in moves:
            llm.seq_rm(slot.id, head_p, head_c)
            llm.seq_add(slot.id, head_c, head_c + n, head_p - head_c)
        n_past = moves[-1][1] + moves[-1][2]
        llm.seq_rm(slot.id, n_past, -1)
        self.kept.forget(slot.id)  # its row followed the old cells
        slot.cache[:] = req.feed[:n_past]
        return n_past

    def _launch(self, slot: Slot, req: Request, n_common: int, now: float) -> None:
        """Start ``req`` in ``slot``, keeping the first ``n_common`` cached tokens (prefix reuse): all of
        them if the slot kept the logits after exactly this prompt, else at most all but the last,
        which is evaluated again for its logits."""
        assert self.llm is not None
        feed = req.feed  # a preempted reply's tokens so far too: the logits after them give its next token
        row = self.kept.take(slot.id, feed, slot.cache) if req.resume is None else None
        n_keep = n_common if row is not None and req.chain is not None else min(n_common, len(feed) - 1)
        n_keep = keep_whole_media(req, n_keep)
        if n_keep < len(slot.cache) and not self.llm.seq_rm(slot.id, n_keep, -1):
            n_keep = 0
        if not self.llm.can_continue(slot.id, n_keep):
            n_keep = 0  # the sliding window before n_keep is gone: evaluate it all again
        if n_keep == 0:
            self.llm.seq_rm(slot.id, 0, -1)
        slot.begin(req, n_keep, now, pos_delta(req, n_keep))
        self.metrics.on_admit(n_keep)
        if row is not None and slot.chain is not None and n_keep == len(feed):  # sample the kept row
            slot.state, slot.timings.t_prompt_last = SlotState.GENERATING, now
            if req.params.post_sampling_probs and req.params.n_probs >= 0:
                token, probs = self.kept.sample_post(slot.chain, row, req.params.n_probs)
                self._on_token(slot, token, now, row, probs)
            else:
                self._on_token(slot, self.kept.sample(slot.chain, row), now, row)
            if not slot.is_processing:  # it ended at that token: the slot's cells are unchanged
                self.kept.put_back(slot.id, req.prompt, row)
