"""Speculative decoding in the batch engine (issue 33): drafted tokens verified in the step's decode.

A generating slot's step normally decodes one token, the one it sampled last. With ``--spec-type``,
the slot's :class:`~workers.inference.speculative.Speculator` may propose tokens to follow it; they go
into the same ``llama_decode`` (every row an output), beside the other slots' tokens and prompt
chunks. After the decode the request's own sampler chain samples row after row, as if each row were
its own step: while its choice equals the drafted token, the token stands and the next row is read;
the first disagreement is the step's last token, and the drafted tokens after it leave the KV cache.

Why this is exact: every token kept is one the chain sampled from the target's logits after exactly
the tokens before it, the step a plain decode would have taken. At temperature 0 the text is the
plain text; with sampling the distribution is the target's (llama.cpp's
``common_sampler_sample_and_accept_n``); penalties, grammars and the RNG advance as in plain decoding
since the chain accepts each sampled token. What may differ is only the float rounding of a batched
decode against a single-token one, as between llama-server's own batch sizes.

With ``--spec-synth-len`` or ``--spec-synth-rates`` (llama-server's benchmarking aid,
:mod:`~workers.inference.speculative._synthetic`) a random draw per row decides instead, and the drafted
token stands as it is: the step costs what it would at that acceptance, and the text is not valid. The
chain still samples every row it reads, so its grammar and penalties follow the target's own tokens.

Not drafted: a request whose next token is forced (its reasoning being ended), one that asks for
``post_sampling_probs``, and every step after a decode that found no room (the plain step's fallback
runs first).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from workers.inference.engine._slots import Slot
from workers.inference.speculative import CPU_TILE, UnsupportedSpeculation, tile_pad

if TYPE_CHECKING:
    from workers.inference.engine._kept_logits import KeptLogits
    from workers.inference.engine._metrics import EngineMetrics
    from workers.inference.engine._row_sampler import RowSampler
    from workers.inference.llama import Batch, LlamaModel
    from workers.inference.speculative import Speculator


def check_rollback(llm: LlamaModel) -> None:
    """A recurrent or hybrid model keeps a state, not cells per position: its drafted tokens cannot be
    taken back one by one (llama-server restores a checkpoint instead; not here yet)."""
    lc = llm.lc
    if lc.llama_model_is_recurrent(llm.model) or lc.llama_model_is_hybrid(llm.model):
        msg = "speculative decoding (--spec-type) needs a transformer's KV cache: this model is recurrent or hybrid"
        raise UnsupportedSpeculation(msg)


class SpeculateMixin:
    """The batch engine's drafting (in ``_fill``) and verification (in ``_commit``)."""

    llm: LlamaModel | None
    kept: KeptLogits
    metrics: EngineMetrics
    sampler: RowSampler
    speculator: Speculator | None = None
    _skip_drafts: bool = False  # the last decode found no room: one plain step first
    _on_cpu: bool = True  # every layer's matrices on the CPU: its kernels take rows four at a time
    _on_token: Callable[..., None]  # the token's handling (a declaration: TokenMixin's)

    def _draft_for(self, s: Slot, room: int, *, alone: bool) -> list[int]:
        """The tokens ``s`` may verify after its pending one this step (at most ``room``); ``alone``: no
        other slot generates in it."""
        spec, req, llm = self.speculator, s.request, self.llm
        if spec is None or req is None or llm is None or s.chain is None or self._skip_drafts:
            return []
        if req.params.post_sampling_probs and req.params.n_probs >= 0:
            return []  # the kept candidates are one row's: llama-server's speculation does not pair them either
        if req.reasoning is not None and req.reasoning.forced_token() is not None:
            return []
        n_max = min(room, llm.n_ctx - len(s.cache) - 2)  # llama-server's get_n_draft_max
        if req.max_tokens > 0:
            n_max = min(n_max, req.max_tokens - s.n_decoded - 1)
        if n_max <= 0:
            return []
        spec.begin(s.id, req.id, s.cache, req.seed)
        return self._cut_at_end(s, spec.draft(s.id, s.cache, s.pending, n_max, alone=alone))

    def _cut_at_end(self, s: Slot, draft: list[int]) -> list[int]:
        """``draft`` before the token that would end the request (an end-of-generation token, or one that
        completes a stop string; the pending token's text is in the stream already): that token is sampled
        from the row before it, as the last token under ``max_tokens``, and a row after it would be
        computed for nothing. llama-server drafts on; at the end of an echo or a fenced answer that is up
        to a whole draft."""
        llm, text = self.llm, s.text
        assert llm is not None
        if not draft or text is None:
            return draft
        eog = next((n for n, token in enumerate(draft, 1) if llm.is_eog(token)), None)
        stop = text.stop_within([llm.piece(token) for token in draft[: eog or len(draft)]])
        ending = stop if stop is not None else eog
        return draft if ending is None else draft[: ending - 1]

    def _share_drafts(self, drafts: list[list[int]]) -> list[list[int]]:
        """The step's drafts, none beside a slot that has none with a KV stream per slot
        (speculative._step_cost)."""
        if self.speculator is None or self.llm is None or not any(drafts):
            return drafts
        return self.speculator.share(drafts, per_stream=not self.llm.cfg.kv_unified, tile=self._tile)

    @property
    def _tile(self) -> int:
        """Rows the decode's kernels take at a time: CPU_TILE on the CPU, 1 (no tiles) with offloaded layers."""
        return CPU_TILE if self._on_cpu else 1

    def _pad_to_tile(self, batch: Batch, gen: list[Slot], n_chunks: int) -> None:
        """Rows that fill the step's last CPU tile (speculative._step_cost.tile_pad), after the longest
        draft's rows in its sequence: computed and thrown away with that draft's rejected tokens
        (``_verify``'s ``seq_rm``). Only where the rows go in one micro-batch, as with ``fit_tile``."""
        llm, spec = self.llm, self.speculator
        drafted = [s for s in gen if s.draft]
        if llm is None or spec is None or not spec.adaptive or not drafted:
            return
        if not llm.cfg.kv_unified and (len(gen) > 1 or n_chunks):
            return  # a KV stream per slot: split_equal makes a micro-batch per sequence's run
        n = tile_pad(batch.n, self._tile)
        s = max(drafted, key=lambda s: len(s.draft))
        after = len(s.cache) + 1 + len(s.draft)  # the position after its last row
        if n and after + n < llm.n_ctx and batch.n + n <= min(batch.capacity, llm.n_ubatch):
            batch.add([s.draft[-1]] * n, after + s.pos_delta, s.id, False, outputs=True)

    def _verify(self, s: Slot, draft: list[int], first_row: int, now: float) -> None:
        """``s``'s rows from ``first_row``: its pending token's, then one per drafted token."""
        llm, spec = self.llm, self.speculator
        assert llm is not None and spec is not None
        sample_one, ctx, greedy = self.sampler.sample_one, llm.ctx, s.request.greedy if s.request else None
        synthetic = spec.synthetic
        s.timings.draft_n += len(draft)
        accepted = 0
        for i in range(len(draft) + 1):
            row = first_row + i
            s.batch_index = row  # _on_token reads the row's logits for logprobs
            token = sample_one(ctx, s.chain, row, greedy)
            if synthetic is None:
                hit = i < len(draft) and token == draft[i]
            else:  # --spec-synth-*: a draw decides, and the drafted token stands (never an end of generation)
                hit = i < len(draft) and synthetic.stands(s.id, i) and not llm.is_eog(draft[i])
                token = draft[i] if hit else token
            if hit:
                accepted += 1
                s.timings.draft_n_accepted += 1
            self._on_token(s, token, now)
            if not s.is_processing:  # it ended at this token: the logits after what the slot holds
                self.kept.keep(s.id, ctx, row, s.cache)
                break
            if not hit:
                break
            s.cache.append(token)  # its cells were computed in this decode
        llm.seq_rm(s.id, len(s.cache) + s.pos_delta, -1)  # the cells of drafted tokens that did not stand
        self.metrics.on_draft(len(draft), accepted)
        spec.accept(s.id, len(draft), accepted)
