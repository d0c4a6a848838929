"""The step's rows sampled on several threads give each row the token ``llama_sampler_sample`` gives it alone.

Differential: twin chains (same settings, same seed) per row, one set sampled
by :class:`RowSampler` on 2 or 3 threads, the other one row at a time on this
thread, over the same decoded batches of four sequences; every row's chain is
different (greedy, the default chain, penalties, a grammar, mirostat), so a row
given another row's token, or a chain advanced out of turn, shows.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from workers.inference.engine import SamplingParams, build_chain
from workers.inference.engine._row_sampler import RowSampler
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
    sampler, batch = RowSampler(lc, threads), Batch(lc, 256)
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
            got = sampler.sample(llm.ctx, list(zip(ours, rows, strict=True)))
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
