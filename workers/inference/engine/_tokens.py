"""What becomes of a sampled token: text for its request, or the request's end.

Kept apart from the step loop (:mod:`workers.inference.engine._batch`) because
two paths sample: a decoded batch row, and a slot's kept row of logits
(:mod:`workers.inference.engine._kept_logits`) when a prompt needs no decode.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from workers.inference.engine._finished import FinishedLog, log_finished
from workers.inference.engine._kept_logits import logits_row
from workers.inference.engine._metrics import EngineMetrics
from workers.inference.engine._sampling import token_logprobs
from workers.inference.engine._slots import Request, Slot

if TYPE_CHECKING:
    from workers.inference.engine._kept_logits import Row, TokenLogprobs
    from workers.inference.llama import LlamaModel


class TokenMixin:
    """The batch engine's handling of one sampled token (on the engine thread)."""

    llm: LlamaModel | None
    slots: list[Slot]
    metrics: EngineMetrics
    context_shift: bool
    on_finished: FinishedLog | None = None
    """One line per finished request in the worker's log (:mod:`._finished`): the worker's log's ``info``."""

    def _release(self, slot: Slot, now: float, *, keep_cache: bool) -> None:
        raise NotImplementedError  # the engine's

    def _on_token(
        self, s: Slot, token: int, now: float, kept: Row | None = None, probs: TokenLogprobs | None = None
    ) -> None:
        """A sampled token: text to the request, or its end; ``kept``: it came from a kept row;
        ``probs``: its log-probabilities as the sampler left them (``post_sampling_probs``)."""
        llm, req, text = self.llm, s.request, s.text
        assert llm is not None and req is not None and text is not None
        s.n_decoded += 1  # the end-of-generation token too, as llama-server's n_decoded (and Ollama's eval_count)
        s.timings.on_token(now)
        req.tokens.append(token)  # llama-server's generated_tokens (return_tokens): the end-of-generation token too
        if llm.is_eog(token):
            self._finish(s, "stop", now)  # it has no text
            return
        lp = None
        if req.params.n_probs >= 0:
            row = kept if kept is not None else logits_row(llm.lc, llm.ctx, s.batch_index, llm.n_vocab)
            chosen, top, top_lp = probs or token_logprobs(row, token, req.params.n_probs)
            lp = (token, chosen, top, top_lp)
        piece = llm.piece(token)
        if req.reasoning is not None:
            req.reasoning.accept(token, piece)
        out = text.feed(piece)
        s.has_new_line = "\n" in out
        if req.timings_per_token:  # llama-server sends each token, with the timings so far
            req.out.put(("t", out, lp, s.timings.to_json(), self._unsent(req)))
        elif out or lp is not None:
            req.out.put(("t", out, lp, None, self._unsent(req)))
        if text.stopped_by is not None:
            self._finish(s, "stop", now)
        elif 0 < req.max_tokens <= s.n_decoded:
            self._finish(s, "length", now)
        elif len(s.cache) + 1 >= llm.n_ctx and not self.context_shift:
            s.truncated = True  # llama-server marks a reply the context cut short as truncated
            self._finish(s, "length", now)
        else:
            s.pending = token

    @staticmethod
    def _unsent(req: Request) -> list[int]:
        """The ids of the tokens sampled since the last piece: what the next piece's text came from
        (a stream's ``tokens``; a token whose text is held back, part of a character or of a possible
        stop string, goes with the piece that releases it)."""
        ids = req.tokens[req.n_sent_tokens :]
        req.n_sent_tokens = len(req.tokens)
        return ids

    def _finish(self, s: Slot, reason: str, now: float) -> None:
        req, text = s.request, s.text
        assert req is not None and text is not None
        rest = text.flush()
        if rest:
            req.out.put(("t", rest, None, None, self._unsent(req)))
        self.metrics.on_finish()
        timings = s.timings.to_json()
        info = {
            "tokens": list(req.tokens),
            "id_slot": s.id,
            "tokens_cached": len(s.cache),
            "stopping_word": text.stopped_by or "",
            "truncated": s.truncated,
        }
        self._release(s, now, keep_cache=True)  # before the reply ends: /slots never lags behind it
        req.out.put(("d", reason, timings, info))
        log_finished(self.on_finished, req.id, req.cmpl_id, reason, timings, **info)
