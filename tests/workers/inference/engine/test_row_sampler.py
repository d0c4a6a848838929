"""The step's rows sampled on several threads give each row the token ``llama_sampler_sample`` gives it alone.

Differential: twin chains (same settings, same seed) per row, one set sampled
by :class:`RowSampler` on 2 or 3 threads, the other one row at a time on this
thread, over the same decoded batches of four sequences; every row's chain is
different (greedy, the default chain, penalties, a grammar, mirostat), so a row
given another row's token, or a chain advanced out of turn, shows.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import pytest

from workers.inference.engine import SamplingParams, build_chain
from workers.inference.engine._row_sampler import RowSampler
from workers.inference.engine._sampling import GreedyPick, greedy_pick
from workers.inference.llama import Batch, ContextConfig, LlamaLog, LlamaModel, load_llama

pytest.importorskip("llama_cpp")

ROWS = [
    SamplingParams(temperature=0.8, seed=11),
    SamplingParams(temperature=1.0, repeat_penalty=1.5, presence_penalty=0.5, seed=5),
    SamplingParams(temperature=1.0, seed=2, grammar='root ::= [a-c]+ "."'),
    SamplingParams(temperature=1.0, mirostat_mode=2, seed=4),
    SamplingParams(temperature=0.0),
]
STEPS = 16


@pytest.fixture(scope="module")
def llm5(tiny_gguf: Path) -> Iterator[LlamaModel]:
    log = LlamaLog(lambda level, text: None)
    log.install()
    cfg = ContextConfig(n_ctx=5 * 64, n_parallel=len(ROWS), warmup=False)
    llm = load_llama(str(tiny_gguf), cfg, log=log, on_progress=lambda p: True).llm
    yield llm
    llm.close()


@pytest.mark.parametrize("threads", [2, 3])
def test_rows_sampled_on_threads_get_the_tokens_sampled_alone(llm5: LlamaModel, threads: int) -> None:
    llm, lc = llm5, llm5.lc
    ours = [build_chain(lc, llm.vocab, llm.n_vocab, p, None) for p in ROWS]
    alone = [build_chain(lc, llm.vocab, llm.n_vocab, p, None) for p in ROWS]
    sampler, batch = RowSampler(lc, threads, llm.n_vocab), Batch(lc, 256)
    prompt = llm.tokenize_whole(b"abc cab", add_special=True, parse_special=False)
    seqs = [list(prompt) for _ in ROWS]
    feeds = [list(prompt) for _ in ROWS]
    try:
        for seq in range(len(ROWS)):
            llm.seq_rm(seq, 0, -1)
        for _ in range(STEPS):
            batch.n = 0
            rows = [batch.add(feed, len(seqs[i]) - len(feed), i, True) for i, feed in enumerate(feeds)]
            assert batch.decode(llm.ctx) == 0
            got = sampler.sample(
                llm.ctx, [(c, row, greedy_pick(p)) for c, row, p in zip(ours, rows, ROWS, strict=True)]
            )
            expected = [
                int(lc.llama_sampler_sample(chain, llm.ctx, row)) for chain, row in zip(alone, rows, strict=True)
            ]
            assert got == expected
            for i, token in enumerate(expected):
                seqs[i].append(token)
                feeds[i] = [token]
        replies = {tuple(s[len(prompt) :]) for s in seqs}
        assert len(replies) > 1, "every row produced the same tokens: the test would not see rows swapped"
    finally:
        for chain in [*ours, *alone]:
            lc.llama_sampler_free(chain)
        sampler.close()
        batch.free()


def test_only_a_chain_that_picks_the_best_logit_is_read_by_argmax() -> None:
    biased = greedy_pick(SamplingParams(temperature=0.0, logit_bias=((3, 5.0), (7, -math.inf))))
    assert biased == GreedyPick((3, 7), (5.0, -math.inf))
    assert greedy_pick(SamplingParams(temperature=0.0)) == GreedyPick()
    assert greedy_pick(SamplingParams(temperature=0.0, repeat_penalty=1.3)) is None, "penalties keep a state"
    assert greedy_pick(SamplingParams(temperature=0.0, grammar='root ::= "a"+')) is None
    assert greedy_pick(SamplingParams(temperature=0.7, seed=3)) is None
    assert greedy_pick(SamplingParams(temperature=0.0, repeat_penalty=1.3, samplers=("top_k",))) is not None, (
        "penalties left out of the samplers' order: the chain is greedy alone"
    )


GREEDY = [
    SamplingParams(temperature=0.0),
    SamplingParams(temperature=0.0, logit_bias=((5, 3.5), (9, -1.0), (5, 0.25))),  # a token twice: both add
    SamplingParams(temperature=0.0, logit_bias=tuple((t, -math.inf) for t in range(40, 120))),
]


@pytest.mark.parametrize("params", GREEDY, ids=["plain", "biased", "banned"])
def test_a_greedy_rows_pick_is_the_chains_token_on_every_row(llm5: LlamaModel, params: SamplingParams) -> None:
    """Every row of a many-row decode (what verifying a draft reads): ``sample_one`` against the chain."""
    llm, lc = llm5, llm5.lc
    pick = greedy_pick(params)
    assert pick is not None
    chain = build_chain(lc, llm.vocab, llm.n_vocab, params, None)
    sampler, batch = RowSampler(lc, 2, llm.n_vocab), Batch(lc, 256)
    try:
        llm.seq_rm(0, 0, -1)
        text = llm.tokenize_whole(b"abc cab bca abc cab bca aab bbc cca", add_special=True, parse_special=False)
        batch.n = 0
        last = batch.add(text, 0, 0, True, outputs=True)
        assert batch.decode(llm.ctx) == 0
        rows = range(last - len(text) + 1, last + 1)
        fast = [sampler.sample_one(llm.ctx, chain, row, pick) for row in rows]
        chained = [int(lc.llama_sampler_sample(chain, llm.ctx, row)) for row in rows]
        assert fast == chained
        banned = {t for t, b in params.logit_bias if b == -math.inf}
        assert len(set(fast)) > 1 if not params.logit_bias else set(fast) & banned == set()
    finally:
        lc.llama_sampler_free(chain)
        sampler.close()
        batch.free()
