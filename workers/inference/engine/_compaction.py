"""Busy slots kept side by side: a running sequence moves into an idle slot below it.

With one KV stream per slot (llama-server's default for ``-np N``, ``kv_unified`` off), llama.cpp's
``split_equal`` puts only *consecutive* sequence ids in one ubatch ("accept only increasing sequence
ids"). When the slots still generating are not side by side (slots 0, 2 and 3, say, after slot 1's
reply ended), every step is two ubatches, and each ubatch pays a whole pass over the weights: on
Gemma 3 270M with two cores, two slots at 0 and 3 cost 38 ms a step against 24 ms at 2 and 3
(docs/benchmarks.md). llama-server lives with it. Here, at the start of a step, the highest
running sequence moves into the lowest idle slot between the running ones (``llama_memory_seq_cp``
copies its stream at the next decode, then ``seq_rm`` frees the old one), until the running slots
make one run.

What moves with it is everything the engine keeps per slot (the request, its tokens, sampler,
timings); the idle slot's cached prompt goes to the RAM prompt cache first, as when a new request
takes an idle slot. Not moved: a request that named its slot (``id_slot``), one holding images,
and nothing at all in a model whose memory is not a plain KV cache (recurrent, hybrid) or with one
KV pool (``--kv-unified``: every sequence shares the stream).
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from workers.inference.engine._slots import Slot, holds_media

if TYPE_CHECKING:
    from workers.inference.engine._kept_logits import KeptLogits
    from workers.inference.engine._metrics import EngineMetrics
    from workers.inference.engine._prompt_cache import PromptCache
    from workers.inference.llama import LlamaModel
    from workers.inference.speculative import Speculator

_KEPT_BY_THE_SLOT = frozenset({"id", "n_ctx"})  # what a move leaves where it is


def side_by_side(busy: list[bool]) -> bool:
    """Whether the busy slots make one run (or there are none)."""
    ids = [i for i, b in enumerate(busy) if b]
    return not ids or ids[-1] - ids[0] + 1 == len(ids)


def compaction_moves(busy: list[bool], movable: list[bool]) -> list[tuple[int, int]]:
    """The ``(from, to)`` moves, in order, that leave the busy slots side by side: the highest
    movable busy slot into the lowest gap, else the lowest one into the highest gap; none when no
    move can close a gap."""
    busy, movable = list(busy), list(movable)
    moves: list[tuple[int, int]] = []
    while not side_by_side(busy):
        ids = [i for i, b in enumerate(busy) if b]
        gaps = [i for i in range(ids[0], ids[-1]) if not busy[i]]
        if movable[ids[-1]]:
            move = (ids[-1], gaps[0])
        elif movable[ids[0]]:
            move = (ids[0], gaps[-1])
        else:
            return moves
        src, dst = move
        busy[src], busy[dst] = False, True
        movable[src], movable[dst] = False, True
        moves.append(move)
    return moves


class CompactionMixin:
    """The batch engine's slot compaction (:func:`compaction_moves`), run once a step."""

    llm: LlamaModel | None
    slots: list[Slot]
    kept: KeptLogits
    metrics: EngineMetrics
    speculator: Speculator | None
    prompt_cache: PromptCache | None
    _gen_waiting: set[int]
    _cv: threading.Condition
    _compactable: bool = False  # set up with the model: streams per slot, a plain KV cache
    _save_prompt: Callable[[Slot], bool]  # the prompt cache's (a declaration: PromptCacheMixin's)
    _debug: Callable[..., None]  # likewise

    def _setup_compaction(self, llm: LlamaModel) -> None:
        lc = llm.lc
        plain_kv = llm.mem is not None and not (
            lc.llama_model_is_recurrent(llm.model) or lc.llama_model_is_hybrid(llm.model)
        )
        self._compactable = plain_kv and not llm.cfg.kv_unified and len(self.slots) > 1

    def _compact_slots(self) -> None:
        if not self._compactable:
            return
        busy = [s.is_processing for s in self.slots]
        if side_by_side(busy):  # most steps: no gap, and no slot's tokens looked at
            return
        movable = [_movable(s) for s in self.slots]
        for src, dst in compaction_moves(busy, movable):
            self._move(self.slots[src], self.slots[dst])

    def _move(self, src: Slot, dst: Slot) -> None:
        llm = self.llm
        assert llm is not None
        if dst.cache and self.prompt_cache is not None:
            self._save_prompt(dst)  # its cells are about to be overwritten
        llm.seq_cp(src.id, dst.id)  # the whole stream, copied at the next decode
        llm.seq_rm(src.id, 0, -1)
        with self._cv:  # /slots reads the slots under it: never half a move
            for f in dataclasses.fields(Slot):
                if f.name not in _KEPT_BY_THE_SLOT:
                    a, b = getattr(src, f.name), getattr(dst, f.name)
                    setattr(src, f.name, b)
                    setattr(dst, f.name, a)
            src.cache = []  # the idle slot's old tokens: their cells are gone
        self.kept.forget(src.id)
        self.kept.forget(dst.id)
        if self.speculator is not None:
            self.speculator.forget(src.id)
            self.speculator.forget(dst.id)
        if src.id in self._gen_waiting:
            self._gen_waiting = (self._gen_waiting - {src.id}) | {dst.id}
        self.metrics.on_slot_move()
        self._debug(f"moved from slot {src.id}: the running slots side by side", dst)


def _movable(s: Slot) -> bool:
    req = s.request
    return s.is_processing and req is not None and req.id_slot < 0 and not holds_media(s)
