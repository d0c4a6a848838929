"""The sampler chain follows llama-server's ``samplers`` order and its extra samplers take effect.

Each test samples from real logits of a tiny model (llama.cpp's own
``llama_sampler_sample``), so an order or a sampler that were ignored would
give the other answer.
"""

from __future__ import annotations

import pytest

from workers.inference.engine import SamplingParams, build_chain
from workers.inference.engine._sampling import sampler_order
from workers.inference.llama import Batch, LlamaModel

pytest.importorskip("llama_cpp")


def _generate(llm: LlamaModel, params: SamplingParams, n: int = 24) -> list[int]:
    lc, batch = llm.lc, Batch(llm.lc, 64)
    chain = build_chain(lc, llm.vocab, llm.n_vocab, params, None, n_ctx=128)
    tokens = llm.tokenize_whole(b"abc cab", add_special=True, parse_special=False)
    out: list[int] = []
    try:
        llm.seq_rm(0, 0, -1)
        feed = tokens
        for _ in range(n):
            batch.n = 0
            row = batch.add(feed, len(tokens) - len(feed), 0, True)
            assert batch.decode(llm.ctx) == 0
            token = int(lc.llama_sampler_sample(chain, llm.ctx, row))
            out.append(token)
            tokens, feed = [*tokens, token], [token]
    finally:
        lc.llama_sampler_free(chain)
        batch.free()
    return out


def test_top_k_1_anywhere_in_the_order_is_greedy_and_left_out_it_is_not(tiny_llm: LlamaModel) -> None:
    greedy = _generate(tiny_llm, SamplingParams(temperature=0.0))
    hot = {"temperature": 50.0, "top_k": 1, "top_p": 1.0, "min_p": 0.0, "seed": 7}
    assert _generate(tiny_llm, SamplingParams(**hot, samplers=("temperature", "top_k"))) == greedy
    assert _generate(tiny_llm, SamplingParams(**hot)) == greedy  # llama-server's default order has top_k
    assert _generate(tiny_llm, SamplingParams(**hot, samplers=("temperature",))) != greedy


def test_dry_penalises_repeated_sequences(tiny_llm: LlamaModel) -> None:
    """The tiny model loves repeating itself greedily; DRY at a high multiplier breaks the repeats."""
    plain = {"temperature": 0.001, "top_k": 0, "top_p": 1.0, "min_p": 0.0, "seed": 3}
    without = _generate(tiny_llm, SamplingParams(**plain))
    with_dry = _generate(tiny_llm, SamplingParams(**plain, dry_multiplier=50.0, dry_allowed_length=1))
    assert with_dry != without


def test_xtc_removes_the_likeliest_choices(tiny_llm: LlamaModel) -> None:
    """XTC always applied with a low threshold drops every likely token but the least likely of them,
    so a near-greedy generation changes."""
    plain = {"temperature": 0.001, "top_k": 0, "top_p": 1.0, "min_p": 0.0, "seed": 3}
    without = _generate(tiny_llm, SamplingParams(**plain))
    with_xtc = _generate(tiny_llm, SamplingParams(**plain, xtc_probability=1.0, xtc_threshold=0.0001))
    assert with_xtc != without


@pytest.mark.parametrize(
    ("value", "order"),
    [
        (["top_k", "temp", "Top-P", "typical", "minp", "bogus"], ("top_k", "temperature", "top_p", "typ_p", "min_p")),
        ("kmt", ("top_k", "min_p", "temperature")),
        ("dyspmxt", ("dry", "typ_p", "top_n_sigma", "top_p", "min_p", "xtc", "temperature")),
        (3, None),
    ],
)
def test_sampler_names_and_letters_as_llama_cpp_reads_them(value: object, order: tuple[str, ...] | None) -> None:
    assert sampler_order(value) == order
