"""``draft-simple``: a small draft model in the worker, in its own context, one sequence per slot.

llama.cpp's ``common_speculative_impl_draft_simple`` mirrors every target decode into the draft
context, so its cells follow the target's. Here the draft context is brought up to date lazily,
when a slot drafts: the slot's tokens are compared with what the draft sequence holds, the rest
removed and the missing ones decoded (the prompt once, then a step's accepted tokens). The target's
other cache moves (a prompt restored from the RAM or disk cache, a slot file, a context shift, a
preemption) then need nothing of the draft side. Drafting itself is llama.cpp's: greedy, one decode
a token, stopping below ``--spec-draft-p-min`` or at ``--spec-draft-n-max``, and a draft shorter than
``--spec-draft-n-min`` is dropped.

The vocabularies must be llama.cpp's "compatible" (``common_speculative_are_compatible``), checked
at load with its rule and words.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from service.core.launch_devices import gpu_layers_number
from workers.inference.engine._kept_logits import logits_row
from workers.inference.engine._slots import common_prefix
from workers.inference.llama import CACHE_TYPES, Batch, ContextConfig, LlamaLog, LlamaModel, LoadError, load_llama
from workers.inference.speculative import UnsupportedSpeculation

if TYPE_CHECKING:
    from service.core.launch_speculative import SpeculativeOptions

VOCAB_MAX_SIZE_DIFFERENCE = 128  # llama.cpp's SPEC_VOCAB_MAX_SIZE_DIFFERENCE
VOCAB_CHECK_START_TOKEN_ID = 5  # llama.cpp's SPEC_VOCAB_CHECK_START_TOKEN_ID
INCOMPATIBLE = "draft model vocab type must match target model to use speculation"  # llama.cpp's exception


def incompatibility(target: LlamaModel, draft: LlamaModel) -> str | None:
    """Why the draft cannot draft for the target (llama.cpp's rule), or None."""
    lc = target.lc
    vt, vd = target.vocab, draft.vocab
    if lc.llama_vocab_type(vt) != lc.llama_vocab_type(vd):
        return "the vocabulary types differ"
    specials = (
        ("bos", lc.llama_vocab_get_add_bos, lc.llama_vocab_bos),
        ("eos", lc.llama_vocab_get_add_eos, lc.llama_vocab_eos),
    )
    for what, add, token in specials:
        if add(vt) != add(vd) or (add(vt) and token(vt) != token(vd)):
            return f"the {what} tokens differ"
    n_t, n_d = lc.llama_vocab_n_tokens(vt), lc.llama_vocab_n_tokens(vd)
    if abs(n_t - n_d) > VOCAB_MAX_SIZE_DIFFERENCE:
        return f"target vocab size {n_t} does not match draft vocab size {n_d}"
    for i in range(VOCAB_CHECK_START_TOKEN_ID, min(n_t, n_d)):
        if lc.llama_vocab_get_text(vt, i) != lc.llama_vocab_get_text(vd, i):
            return f"token {i} content differs"
    return None


def load_draft(options: SpeculativeOptions, target: LlamaModel, n_seq: int, log: LlamaLog | None) -> DraftModel:
    """The draft model beside ``target``, its context shaped as the target's (a sequence per slot)."""
    path = options.spec_draft_model
    if not path:
        msg = "--spec-type draft-simple needs a draft model (-md FILE)"
        raise UnsupportedSpeculation(msg)
    cfg = draft_config(options, target.cfg, n_seq)
    try:
        loaded = load_llama(path, cfg, log=log or LlamaLog(lambda _level, _text: None), on_progress=lambda _p: True)
    except LoadError as exc:
        msg = f"the draft model (-md {path}) did not load: {exc}"
        raise UnsupportedSpeculation(msg) from None
    why = incompatibility(target, loaded.llm)
    if why is not None:
        loaded.llm.close()
        msg = f"{INCOMPATIBLE}: {why} (-md {path})"
        raise UnsupportedSpeculation(msg)
    return DraftModel(loaded.llm, options.spec_draft_n_max, options.spec_draft_n_min, options.spec_draft_p_min)


def draft_config(options: SpeculativeOptions, target: ContextConfig, n_seq: int) -> ContextConfig:
    """The draft's context: the target's shape (its size, a sequence per slot, its batch), with the
    draft's own threads, KV cache types and offload, as llama-server sets up its draft context:
    threads default to the target's (``-tbd`` to ``-td``; <= 0 means every core), cache types to
    f16, layers to auto and devices to the target's."""
    threads = _threads(options.spec_draft_threads, target.n_threads)
    placement = dataclasses.replace(
        target.placement,
        n_gpu_layers=gpu_layers_number(options.spec_draft_ngl),
        devices=tuple(options.spec_draft_device.split(",")) if options.spec_draft_device else target.placement.devices,
    )
    return dataclasses.replace(
        target,
        n_parallel=n_seq,
        n_threads=threads,
        n_threads_batch=_threads(options.spec_draft_threads_batch, threads),
        type_k=CACHE_TYPES[options.spec_draft_type_k],
        type_v=CACHE_TYPES[options.spec_draft_type_v],
        placement=placement,
        embedding=False,
        warmup=False,
        model=(),
        rope=(),
    )


def _threads(asked: int | None, default: int) -> int:
    if asked is None:
        return default
    return asked if asked > 0 else os.cpu_count() or 1  # llama.cpp: hardware_concurrency()


class DraftModel:
    """The ``draft-simple`` drafter (:class:`~workers.inference.speculative.Drafter`)."""

    name = "draft-simple"

    def __init__(self, llm: LlamaModel, n_max: int, n_min: int, p_min: float) -> None:
        self.llm, self._n_max, self.n_min, self.p_min = llm, n_max, n_min, p_min
        self.batch = Batch(llm.lc, llm.n_batch)
        self.held: dict[int, list[int]] = {}  # per sequence: the tokens whose cells the draft context holds

    @property
    def n_max(self) -> int:
        return self._n_max

    def begin(self, seq: int, prompt: Sequence[int]) -> None:
        pass

    def accept(self, seq: int, n_accepted: int) -> None:
        pass  # the next draft compares the slot's tokens with what the sequence holds

    def draft(self, seq: int, history: Sequence[int], last: int, n_max: int, *, alone: bool = True) -> list[int]:
        n_max = min(n_max, self._n_max)
        if n_max <= 0:
            return []
        wanted = [*history, last]
        if not self._catch_up(seq, wanted):
            return []
        drafted: list[int] = []
        row = self.batch.n - 1
        while True:
            token, p = self._best(row)
            if p < self.p_min:
                break
            drafted.append(token)
            if len(drafted) >= n_max or self.llm.is_eog(token):
                break
            row = self._decode([token], len(wanted) + len(drafted) - 1, seq)
            if row < 0:
                break
            self.held[seq].append(token)
        return drafted if len(drafted) >= self.n_min else []

    def _catch_up(self, seq: int, wanted: list[int]) -> bool:
        """The draft sequence holds ``wanted`` and the last batch's last row has the logits after it."""
        held = self.held.get(seq, [])
        keep = min(common_prefix(held, wanted), len(wanted) - 1)  # the last one again, for its logits
        if keep < len(held) and not self.llm.seq_rm(seq, keep, -1):
            keep = 0
            self.llm.seq_rm(seq, 0, -1)
        self.held[seq] = wanted[:keep]
        step = self.batch.capacity
        for start in range(keep, len(wanted), step):
            if self._decode(wanted[start : start + step], start, seq) < 0:
                self.llm.seq_rm(seq, 0, -1)
                self.held[seq] = []
                return False
            self.held[seq] = wanted[: start + step]
        return True

    def _decode(self, tokens: list[int], pos0: int, seq: int) -> int:
        """``tokens`` at ``pos0`` in ``seq``, logits for the last; its row, or -1 on a failed decode."""
        self.batch.n = 0
        row = self.batch.add(tokens, pos0, seq, True)
        return row if self.batch.decode(self.llm.ctx) == 0 else -1

    def _best(self, row: int) -> tuple[int, float]:
        """The draft's greedy choice at ``row`` and its probability (1.0 when ``p_min`` does not ask)."""
        logits = logits_row(self.llm.lc, self.llm.ctx, row, self.llm.n_vocab)
        token = int(logits.argmax())
        if self.p_min <= 0.0:
            return token, 1.0
        import numpy as np

        return token, 1.0 / float(np.exp(logits - logits[token]).sum())  # the softmax at its peak

    def close(self) -> None:
        self.batch.free()
        self.llm.close()
