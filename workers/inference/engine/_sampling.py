"""Per-request sampling in llama.cpp's sampler chain (``llama_sampler_*``).

Why the C chain and not numpy: the chain reuses one candidate buffer per
request and runs top-k/top-p/min-p/penalties/grammar in C, so a step costs
no vocabulary-sized Python allocation (Gemma's vocabulary is 262,144 entries;
a float32 copy per token is 1 MiB). ``llama_sampler_sample`` also accepts the
sampled token (penalties, grammar state), so callers never accept twice.

The chain follows llama.cpp's ``common_sampler_init``: logit bias, penalties,
grammar, then greedy (temperature 0), plain distribution (negative), mirostat,
or the ``samplers`` order (llama-server's default: dry → top-n-sigma → top-k →
typical → top-p → min-p → xtc → temperature) and the distribution (or
adaptive-p when listed). Samplers that would change nothing (DRY at multiplier
0, XTC at probability 0, top-n-sigma ≤ 0) are left out, so the default chain
is the one llama-cpp-python's ``Llama`` builds. Logprobs are the model's raw
log-softmax, as llama-cpp-python reports them, computed only for requests that ask.
"""

from __future__ import annotations

import ctypes
import math
import re
from dataclasses import dataclass, replace
from typing import Any, TypedDict

from workers.inference.speculative import LLAMA_DEFAULT_SEED  # llama.cpp's "pick a random seed"

DEFAULT_SAMPLERS = ("penalties", "dry", "top_n_sigma", "top_k", "typ_p", "top_p", "min_p", "xtc", "temperature")
DEFAULT_DRY_BREAKERS = ("\n", ":", '"', "*")
# llama.cpp's names (common_sampler_types_from_names, with its aliases) and --sampler-seq letters
SAMPLER_NAMES = {
    "dry": "dry",
    "top_k": "top_k",
    "top_p": "top_p",
    "nucleus": "top_p",
    "top_n_sigma": "top_n_sigma",
    "typ_p": "typ_p",
    "typical_p": "typ_p",
    "typ": "typ_p",
    "typical": "typ_p",
    "min_p": "min_p",
    "temperature": "temperature",
    "temp": "temperature",
    "xtc": "xtc",
    "infill": "infill",
    "penalties": "penalties",
    "adaptive_p": "adaptive_p",
}
SAMPLER_LETTERS = {
    "d": "dry",
    "k": "top_k",
    "y": "typ_p",
    "p": "top_p",
    "s": "top_n_sigma",
    "m": "min_p",
    "t": "temperature",
    "x": "xtc",
    "i": "infill",
    "e": "penalties",
    "a": "adaptive_p",
}


def sampler_order(value: Any) -> tuple[str, ...] | None:
    """llama-server's ``samplers``: a list of names (``top-k`` and ``topk`` spellings too, unknown
    ones skipped as llama.cpp skips them) or a string of ``--sampler-seq`` letters; None if neither."""
    if isinstance(value, str):
        return tuple(SAMPLER_LETTERS[c] for c in value if c in SAMPLER_LETTERS)
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        canon = {k.replace("_", ""): v for k, v in SAMPLER_NAMES.items()}
        names = (v.strip().lower().replace("-", "_") for v in value)
        return tuple(
            SAMPLER_NAMES.get(n) or canon[n.replace("_", "")]
            for n in names
            if n in SAMPLER_NAMES or n.replace("_", "") in canon
        )
    return None


class SamplingView(TypedDict):
    """A request's sampling as llama-server shows it: the ``params`` of ``/slots`` and ``/props``."""

    temperature: float
    top_k: int
    top_p: float
    min_p: float
    typical_p: float
    repeat_penalty: float
    presence_penalty: float
    frequency_penalty: float
    repeat_last_n: int
    mirostat: int
    mirostat_tau: float
    mirostat_eta: float
    seed: int
    n_probs: int
    grammar: str
    dry_multiplier: float
    dry_base: float
    dry_allowed_length: int
    dry_penalty_last_n: int
    dry_sequence_breakers: list[str]
    xtc_probability: float
    xtc_threshold: float
    top_n_sigma: float
    dynatemp_range: float
    dynatemp_exponent: float
    adaptive_target: float
    adaptive_decay: float
    samplers: list[str]


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
    post_sampling_probs: bool = False  # llama-server's: n_probs read after the chain, not from the logits
    # llama.cpp's samplers beyond llama-cpp-python's (llama-server's request fields and defaults)
    dry_multiplier: float = 0.0
    dry_base: float = 1.75
    dry_allowed_length: int = 2
    dry_penalty_last_n: int = -1
    dry_sequence_breakers: tuple[str, ...] = DEFAULT_DRY_BREAKERS
    xtc_probability: float = 0.0
    xtc_threshold: float = 0.1
    top_n_sigma: float = -1.0
    dynatemp_range: float = 0.0
    dynatemp_exponent: float = 1.0
    adaptive_target: float = -1.0
    adaptive_decay: float = 0.9
    samplers: tuple[str, ...] = DEFAULT_SAMPLERS

    def to_json(self) -> SamplingView:
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
            "dry_multiplier": self.dry_multiplier,
            "dry_base": self.dry_base,
            "dry_allowed_length": self.dry_allowed_length,
            "dry_penalty_last_n": self.dry_penalty_last_n,
            "dry_sequence_breakers": list(self.dry_sequence_breakers),
            "xtc_probability": self.xtc_probability,
            "xtc_threshold": self.xtc_threshold,
            "top_n_sigma": self.top_n_sigma,
            "dynatemp_range": self.dynatemp_range,
            "dynatemp_exponent": self.dynatemp_exponent,
            "adaptive_target": self.adaptive_target,
            "adaptive_decay": self.adaptive_decay,
            "samplers": list(self.samplers),
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


def chain_seed(p: SamplingParams, default_seed: int | None) -> int:
    """The seed a request's random choices start from: its own, else the worker's ``--seed``, else
    llama.cpp's default (a random one), as a 32-bit value."""
    seed = p.seed if p.seed is not None else default_seed
    return LLAMA_DEFAULT_SEED if seed is None else seed & 0xFFFFFFFF


def build_chain(lc: Any, vocab: Any, n_vocab: int, p: SamplingParams, default_seed: int | None, n_ctx: int = 0) -> Any:
    """A new sampler chain for one request; the caller frees it with ``llama_sampler_free``.
    ``n_ctx``: what a ``-1`` look-back (``repeat_last_n``, ``dry_penalty_last_n``) means, as in llama-server."""
    if p.penalty_last_n == -1 or p.dry_penalty_last_n == -1:
        whole = max(n_ctx, 0)
        p = replace(
            p,
            penalty_last_n=whole if p.penalty_last_n == -1 else p.penalty_last_n,
            dry_penalty_last_n=whole if p.dry_penalty_last_n == -1 else p.dry_penalty_last_n,
        )
    seed = chain_seed(p, default_seed)
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
    if _penalised(p):
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
    try:
        out.extend(_final_samplers(lc, vocab, n_vocab, p, seed))
    except BaseException:
        for s in out:
            lc.llama_sampler_free(s)
        raise
    return out


def _penalised(p: SamplingParams) -> bool:
    """Whether the chain has the penalties sampler (it changes nothing at its defaults)."""
    changes = p.repeat_penalty != 1.0 or p.frequency_penalty != 0.0 or p.presence_penalty != 0.0
    return changes and "penalties" in p.samplers


@dataclass(frozen=True, slots=True)
class GreedyPick:
    """A chain of the logit bias (if any) and greedy alone, as a pure function of the logits: the first
    largest logit after the biases (llama.cpp's greedy keeps the first of equal ones, as numpy's argmax)."""

    tokens: tuple[int, ...] = ()
    biases: tuple[float, ...] = ()


def greedy_pick(p: SamplingParams) -> GreedyPick | None:
    """What :func:`build_chain` makes of ``p`` when it is only a pick of the best logit (temperature 0,
    no penalties, no grammar), or None. Such a chain keeps no state: accepting a token changes nothing."""
    if p.temperature != 0.0 or p.grammar or _penalised(p):
        return None
    return GreedyPick(tuple(t for t, _ in p.logit_bias), tuple(b for _, b in p.logit_bias))


def _final_samplers(lc: Any, vocab: Any, n_vocab: int, p: SamplingParams, seed: int) -> list[Any]:
    if p.temperature == 0.0:
        return [lc.llama_sampler_init_greedy()]
    if p.temperature < 0.0:
        return [lc.llama_sampler_init_dist(seed)]
    if p.mirostat_mode == 1:
        return [lc.llama_sampler_init_mirostat(n_vocab, seed, p.mirostat_tau, p.mirostat_eta, 100)]
    if p.mirostat_mode == 2:
        return [lc.llama_sampler_init_mirostat_v2(seed, p.mirostat_tau, p.mirostat_eta)]
    out = [s for name in p.samplers if (s := _ordered(lc, vocab, p, name, seed)) is not None]
    if "adaptive_p" in p.samplers:  # like dist, it picks the token: last (llama.cpp)
        out.append(lc.llama_sampler_init_adaptive_p(p.adaptive_target, p.adaptive_decay, seed))
    else:
        out.append(lc.llama_sampler_init_dist(seed))
    return out


def _ordered(lc: Any, vocab: Any, p: SamplingParams, name: str, seed: int) -> Any:
    """One sampler of the ``samplers`` order, or None where it would change nothing."""
    if name == "dry" and p.dry_multiplier > 0.0:
        breakers = [b.encode("utf-8") for b in p.dry_sequence_breakers]
        arr = (ctypes.c_char_p * max(len(breakers), 1))(*breakers)
        return lc.llama_sampler_init_dry(
            vocab, p.dry_multiplier, p.dry_base, p.dry_allowed_length, p.dry_penalty_last_n, arr, len(breakers)
        )
    if name == "top_n_sigma" and p.top_n_sigma > 0.0:
        return lc.llama_sampler_init_top_n_sigma(p.top_n_sigma)
    if name == "top_k":
        return lc.llama_sampler_init_top_k(p.top_k)
    if name == "typ_p":
        return lc.llama_sampler_init_typical(p.typical_p, 1)
    if name == "top_p":
        return lc.llama_sampler_init_top_p(p.top_p, 1)
    if name == "min_p":
        return lc.llama_sampler_init_min_p(p.min_p, 1)
    if name == "xtc" and p.xtc_probability > 0.0:
        return lc.llama_sampler_init_xtc(p.xtc_probability, p.xtc_threshold, 1, seed)
    if name == "temperature":
        if p.dynatemp_range > 0.0:
            return lc.llama_sampler_init_temp_ext(p.temperature, p.dynatemp_range, p.dynatemp_exponent)
        return lc.llama_sampler_init_temp(p.temperature)
    if name == "infill":
        return lc.llama_sampler_init_infill(vocab)
    return None  # penalties come first (above); adaptive_p last


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
