"""Kept logits: an exact repeat of a slot's cached prompt samples without a decode, and the same tokens come out.

Differential, both ways: in-process, the kept-row sampler against llama.cpp's
own ``llama_sampler_sample`` on the same logits with twin chains (same
settings, same seed); through a real worker, a request that takes the
shortcut against the same request evaluated from scratch (``cache_prompt``
false), which is the path every request took before.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.workers.conftest import WorkerProc
from workers.inference.engine import SamplingParams, build_chain
from workers.inference.engine._kept_logits import MAX_ROWS, KeptLogits
from workers.inference.llama import Batch, LlamaModel

pytest.importorskip("llama_cpp")

SETTINGS = {
    "greedy": SamplingParams(temperature=0.0),
    "default chain": SamplingParams(temperature=0.8, seed=11),
    "narrow": SamplingParams(temperature=1.5, top_k=5, top_p=0.5, min_p=0.0, typical_p=0.9, seed=3),
    "penalties": SamplingParams(
        temperature=1.0, repeat_penalty=1.5, presence_penalty=0.5, frequency_penalty=0.3, seed=5
    ),
    "logit bias": SamplingParams(temperature=1.0, seed=9, logit_bias=((6 + ord("a"), 5.0), (6 + ord("b"), -100.0))),
    "grammar": SamplingParams(temperature=1.0, seed=2, grammar='root ::= [a-c]+ "."'),
    "mirostat 2": SamplingParams(temperature=1.0, mirostat_mode=2, seed=4),
    "plain distribution": SamplingParams(temperature=-1.0, seed=8),
    # llama.cpp's samplers beyond llama-cpp-python's (llama-server's request fields)
    "dry": SamplingParams(temperature=1.0, seed=12, dry_multiplier=0.8, dry_allowed_length=1),
    "xtc": SamplingParams(temperature=1.0, seed=13, xtc_probability=0.5, xtc_threshold=0.01),
    "top-n-sigma": SamplingParams(temperature=1.0, seed=14, top_n_sigma=1.0),
    "dynamic temperature": SamplingParams(temperature=1.0, seed=15, dynatemp_range=0.5, dynatemp_exponent=2.0),
    "samplers order": SamplingParams(temperature=1.0, seed=16, samplers=("temperature", "min_p", "top_k")),
}


@pytest.mark.parametrize("name", list(SETTINGS))
def test_kept_row_sampling_picks_what_llama_sampler_sample_picks(tiny_llm: LlamaModel, name: str) -> None:
    """Twin chains, one through ``llama_sampler_sample``, one through a kept copy of the same row,
    agree on every token of a 12-token generation (penalty and grammar state advance alike)."""
    llm, lc = tiny_llm, tiny_llm.lc
    params = SETTINGS[name]
    native = build_chain(lc, llm.vocab, llm.n_vocab, params, None)
    ours = build_chain(lc, llm.vocab, llm.n_vocab, params, None)
    kept, batch = KeptLogits(lc, llm.n_vocab), Batch(lc, 64)
    tokens = llm.tokenize_whole(b"abc cab", add_special=True, parse_special=False)
    try:
        llm.seq_rm(0, 0, -1)
        produced: list[tuple[int, int]] = []
        feed = tokens
        for _ in range(12):
            batch.n = 0
            row = batch.add(feed, len(tokens) - len(feed), 0, True)
            assert batch.decode(llm.ctx) == 0
            kept.keep(0, llm.ctx, row, tokens)
            copy = kept.take(0, tokens, tokens)
            assert copy is not None
            ours_token = kept.sample(ours, copy)
            native_token = int(lc.llama_sampler_sample(native, llm.ctx, row))
            produced.append((native_token, ours_token))
            tokens = [*tokens, native_token]
            feed = [native_token]
        assert [a for a, _ in produced] == [b for _, b in produced], produced
        if name == "grammar":
            assert bytes(b for t, _ in produced for b in llm.piece(t)).rstrip(b".") != b""
    finally:
        lc.llama_sampler_free(native)
        lc.llama_sampler_free(ours)
        batch.free()


def test_at_most_max_rows_are_kept_and_the_oldest_goes_first(tiny_llm: LlamaModel) -> None:
    llm, batch = tiny_llm, Batch(tiny_llm.lc, 8)
    kept = KeptLogits(llm.lc, llm.n_vocab)
    tokens = llm.tokenize_whole(b"ab", add_special=True, parse_special=False)
    try:
        llm.seq_rm(0, 0, -1)
        row = batch.add(tokens, 0, 0, True)
        assert batch.decode(llm.ctx) == 0
        for slot in range(MAX_ROWS + 1):
            kept.keep(slot, llm.ctx, row, tokens)
        assert kept.take(0, tokens, tokens) is None  # evicted for the ninth
        rows = [kept.take(slot, tokens, tokens) for slot in range(1, MAX_ROWS + 1)]
        assert all(r is not None for r in rows) and len({id(r) for r in rows}) == MAX_ROWS
        kept.keep(MAX_ROWS + 1, llm.ctx, row, tokens)  # reuses a freed buffer
        again = kept.take(MAX_ROWS + 1, tokens, tokens)
        assert again is not None and any(again is r for r in rows)
    finally:
        batch.free()


def _complete(url: str, **body: Any) -> dict[str, Any]:
    r = httpx.post(f"{url}/v1/completions", json={"prompt": "the same prompt again", **body}, timeout=60)
    assert r.status_code == 200, r.text
    return dict(r.json())


@pytest.mark.timeout(120)
def test_an_exact_repeat_skips_the_decode_and_generates_what_a_fresh_evaluation_does(
    spawn_worker: Callable[..., WorkerProc], tiny_gguf: Path
) -> None:
    """One slot, so every request meets the previous one's cells. A request evaluated from scratch is
    the reference; a 1-token request evaluated from scratch leaves its slot holding the prompt and
    the logits after it; the same request as the reference then takes the shortcut (nothing
    evaluated) and must produce the reference's tokens and logprobs."""
    url = spawn_worker(tiny_gguf, "-np", "1").wait_ready()
    for body in ({"temperature": 0.0}, {"temperature": 0.9, "seed": 5}, {"temperature": 0.7, "seed": 6, "logprobs": 3}):
        reference = _complete(url, max_tokens=12, cache_prompt=False, **body)
        assert reference["timings"]["cache_n"] == 0
        _complete(url, max_tokens=1, cache_prompt=False)
        repeat = _complete(url, max_tokens=12, **body)
        n_prompt = repeat["usage"]["prompt_tokens"]
        assert repeat["timings"]["prompt_n"] == 0 and repeat["timings"]["cache_n"] == n_prompt, repeat["timings"]
        assert repeat["choices"][0]["text"] == reference["choices"][0]["text"], body
        assert repeat["choices"][0]["logprobs"] == reference["choices"][0]["logprobs"], body
    # A 1-token request ends at its first token and leaves the slot as it was: repeats keep skipping.
    first = _complete(url, max_tokens=1, temperature=0.0, cache_prompt=False)
    for _ in range(3):
        again = _complete(url, max_tokens=1, temperature=0.0)
        assert again["timings"]["prompt_n"] == 0 and again["choices"][0]["text"] == first["choices"][0]["text"]
    # A different prompt in the slot: its cells changed, so the first prompt is evaluated again.
    _complete(url, prompt="another prompt", max_tokens=1)
    assert _complete(url, max_tokens=1, temperature=0.0)["timings"]["prompt_n"] >= 1
