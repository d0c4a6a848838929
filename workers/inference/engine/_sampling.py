"""Per-request sampling in llama.cpp's sampler chain (``llama_sampler_*``).

Why the C chain and not numpy: the chain reuses one candidate buffer per
request and runs top-k/top-p/min-p/penalties/grammar in C, so a step costs
no vocabulary-sized Python allocation (Gemma's vocabulary is 262,144 entries;
a float32 copy per token is 1 MiB). ``llama_sampler_sample`` also accepts the
sampled token (penalties, grammar state), so callers never accept twice.

The chain mirrors ``llama_cpp.Llama._init_sampler`` so results match the
high-level path: logit bias, penalties, grammar, then greedy (temperature 0),
plain distribution (negative), mirostat, or top-k → typical → top-p → min-p →
temperature → distribution. Logprobs are the model's raw log-softmax, as
llama-cpp-python reports them, computed only for requests that ask.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

LLAMA_DEFAULT_SEED = 0xFFFFFFFF  # llama.cpp picks a random seed


@dataclass(frozen=True)
class SamplingParams:
    """Validated sampling settings of one request (defaults: llama-cpp-python's completion defaults)."""

    temperature: float = 0.8
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    typical_p: float = 1.0
    repeat_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    penalty_last_n: int = 64
    mirostat_mode: int = 0
    mirostat_tau: float = 5.0
    mirostat_eta: float = 0.1
    seed: int | None = None
    logit_bias: tuple[tuple[int, float], ...] = ()
    grammar: str | None = None  # GBNF text, root rule "root"
    n_probs: int = -1  # -1: no logprobs; 0: the sampled token's; N: also the N most likely

    def to_json(self) -> dict[str, Any]:
        """The ``params`` object of ``/slots`` (llama-server's names where they exist)."""
        return {
            "temperature": self.temperature,
            "top_k": self.top_k,
            "top_p": self.top_p,
            "min_p": self.min_p,
            "typical_p": self.typical_p,
            "repeat_penalty": self.repeat_penalty,
            "presence_penalty": self.presence_penalty,
            "frequency_penalty": self.frequency_penalty,
            "repeat_last_n": self.penalty_last_n,
            "mirostat": self.mirostat_mode,
            "mirostat_tau": self.mirostat_tau,
            "mirostat_eta": self.mirostat_eta,
            "seed": self.seed if self.seed is not None else LLAMA_DEFAULT_SEED,
            "n_probs": max(self.n_probs, 0),
            "grammar": self.grammar or "",
        }


# llama-cpp-python's JSON-schema converter (``json_schema_to_gbnf``) lets raw
# control characters into strings (``char ::= [^"\\] | ...``), which strict JSON
# parsers reject; its own JSON_GBNF and llama.cpp's converter exclude them.
_LOOSE_JSON_CHAR = re.compile(r'^char ::= \[\^"\\\\\] \| ', re.MULTILINE)
_STRICT_JSON_CHAR = r'char ::= [^"\\\x7F\x00-\x1F] | '


def strict_json_strings(gbnf: str) -> str:
    """``gbnf`` with the converter's string-character rule made strict JSON."""
    return _LOOSE_JSON_CHAR.sub(lambda _m: _STRICT_JSON_CHAR, gbnf)


class SamplerError(ValueError):
    """The request's sampling settings cannot be built (bad grammar, token id out of range)."""


def build_chain(lc: Any, vocab: Any, n_vocab: int, p: SamplingParams, default_seed: int | None) -> Any:
    """A new sampler chain for one request; the caller frees it with ``llama_sampler_free``."""
    seed = p.seed if p.seed is not None else default_seed
    seed = LLAMA_DEFAULT_SEED if seed is None else seed & 0xFFFFFFFF
    chain = lc.llama_sampler_chain_init(lc.llama_sampler_chain_default_params())
    try:
        for sampler in _samplers(lc, vocab, n_vocab, p, seed):
            lc.llama_sampler_chain_add(chain, sampler)  # the chain owns it from here
    except BaseException:
        lc.llama_sampler_free(chain)
        raise
    return chain


def _samplers(lc: Any, vocab: Any, n_vocab: int, p: SamplingParams, seed: int) -> list[Any]:
    out: list[Any] = []
    if p.logit_bias:
        if any(not 0 <= tok < n_vocab for tok, _ in p.logit_bias):
            raise SamplerError(f"logit_bias: token ids must be in [0, {n_vocab})")
        arr = (lc.llama_logit_bias * len(p.logit_bias))(*[lc.llama_logit_bias(t, b) for t, b in p.logit_bias])
        out.append(lc.llama_sampler_init_logit_bias(n_vocab, len(p.logit_bias), arr))
    if p.repeat_penalty != 1.0 or p.frequency_penalty != 0.0 or p.presence_penalty != 0.0:
        out.append(
            lc.llama_sampler_init_penalties(
                n_vocab, p.penalty_last_n, p.repeat_penalty, p.frequency_penalty, p.presence_penalty
            )
        )
    if p.grammar:
        grammar = lc.llama_sampler_init_grammar(vocab, p.grammar.encode("utf-8"), b"root")
        if not grammar:
            for s in out:
                lc.llama_sampler_free(s)
            raise SamplerError("the grammar could not be parsed")
        out.append(grammar)
    out.extend(_final_samplers(lc, n_vocab, p, seed))
    return out


def _final_samplers(lc: Any, n_vocab: int, p: SamplingParams, seed: int) -> list[Any]:
    if p.temperature == 0.0:
        return [lc.llama_sampler_init_greedy()]
    if p.temperature < 0.0:
        return [lc.llama_sampler_init_dist(seed)]
    if p.mirostat_mode == 1:
        return [lc.llama_sampler_init_mirostat(n_vocab, seed, p.mirostat_tau, p.mirostat_eta, 100)]
    if p.mirostat_mode == 2:
        return [lc.llama_sampler_init_mirostat_v2(seed, p.mirostat_tau, p.mirostat_eta)]
    return [
        lc.llama_sampler_init_top_k(p.top_k),
        lc.llama_sampler_init_typical(p.typical_p, 1),
        lc.llama_sampler_init_top_p(p.top_p, 1),
        lc.llama_sampler_init_min_p(p.min_p, 1),
        lc.llama_sampler_init_temp(p.temperature),
        lc.llama_sampler_init_dist(seed),
    ]


def token_logprobs(logits: Any, token: int, top_n: int) -> tuple[float, list[int], list[float]]:
    """The sampled token's logprob and the ``top_n`` best (token, logprob) from one row of logits.

    Only for requests that ask for logprobs: ``logits`` is a numpy view of the
    batch row (or a slot's kept row), one log-softmax, one partial sort.
    """
    import numpy as np

    n_vocab = len(logits)
    peak = float(logits.max())
    lse = peak + math.log(float(np.exp(logits - peak).sum()))
    chosen = float(logits[token]) - lse
    if top_n <= 0:
        return chosen, [], []
    k = min(top_n, n_vocab)
    best = np.argpartition(-logits, k - 1)[:k]
    best = best[np.argsort(-logits[best])]
    return chosen, [int(t) for t in best], [float(logits[t]) - lse for t in best]
