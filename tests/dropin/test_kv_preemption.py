"""Preemption by recompute in one shared KV pool (``--kv-unified``): where llama-server aborts every
running reply with a 500 "Context size has been exceeded.", the youngest running request gives its
cells back, waits, evaluates its prompt and tokens again and goes on; its client sees a pause
(workers/inference/engine/_preempt.py). Served as ``llama-server -m FILE -c 256 -np N --kv-unified``
would be, on one tiny GGUF; greedy, so each reply has the one text it has alone.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from devtools.service_process import ServiceProcess
from devtools.tiny_gguf import write_tiny_gguf
from tests.eventually import eventually

pytestmark = pytest.mark.timeout(300)

GREEDY = {"ignore_eos": True, "temperature": 0}


def _serve(root: Path, n_slots: int) -> ServiceProcess:
    model = write_tiny_gguf(root / "tiny.gguf", n_ctx=1024)
    args = ["-m", str(model), "-c", "256", "-np", str(n_slots), "--kv-unified", "--cache-ram", "0", "--metrics"]
    return ServiceProcess(root / "home", args=[*args, "-b", "32", "--verbose"])


@pytest.fixture(scope="module")
def two(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    with _serve(tmp_path_factory.mktemp("preempt-2"), 2) as p:
        yield p


def _post(svc: ServiceProcess, **body: Any) -> Any:
    answer = httpx.post(f"{svc.url}/completion", json=body, timeout=240)
    assert answer.status_code == 200, answer.text
    return answer.json()


def _preempted(svc: ServiceProcess) -> int:
    text = httpx.get(f"{svc.url}/metrics", timeout=30).text
    found = re.search(r"^modelrouter:requests_preempted_total (\S+)$", text, re.M)
    assert found is not None, text
    return int(float(found[1]))


NEAR_TIE = 2e-3
"""A greedy choice this close to the runner-up (in log-probability) may flip with rounding: a row
decoded in a batch of other sizes, or a token's cells recomputed, moves a logprob by ~3e-4 on this
near-uniform model (measured). Preemption recomputes cells, so a reply may take the runner-up there."""


def _ids(answer: Any) -> list[int]:
    return [p["id"] for p in answer["completion_probabilities"]]


def _assert_same_reply(alone: Any, ids: list[int], text: str) -> None:
    """``ids``/``text`` are the reply ``alone`` is, token for token, unless the first difference
    is a near-tie of ``alone``'s that went to its runner-up (what follows then follows from that)."""
    want = _ids(alone)
    assert len(ids) == len(want)
    k = next((i for i, (a, b) in enumerate(zip(want, ids, strict=True)) if a != b), None)
    if k is None:
        assert text == alone["content"]
        return
    top = alone["completion_probabilities"][k]["top_logprobs"]
    assert ids[k] == top[1]["id"] and top[0]["logprob"] - top[1]["logprob"] < NEAR_TIE, (k, top, ids[k])


PROMPTS = [[5] * 10, [9] * 10]
WATCHED = {"n_predict": 200, "n_probs": 2, **GREEDY}  # the token ids and the runner-ups come back too


def test_concurrent_replies_over_the_pool_all_finish_with_the_text_each_has_alone(two: ServiceProcess) -> None:
    """Two prompts at once, 210 cells each, in a pool of 256: both answer 200 with all 200 tokens
    and the reply each gives alone, because one was preempted (the counter and the log say so)."""
    alone = [_post(two, prompt=p, **WATCHED) for p in PROMPTS]
    before = _preempted(two)
    both = _post(two, prompt=PROMPTS, **WATCHED)
    assert [(r["tokens_predicted"], r["truncated"], r["stop_type"]) for r in both] == [(200, False, "limit")] * 2
    assert [r["timings"]["predicted_n"] for r in both] == [200, 200]
    for one, got in zip(alone, both, strict=True):
        _assert_same_reply(one, _ids(got), got["content"])
    assert _preempted(two) > before, "the pool was full: a reply was preempted"
    eventually(lambda: re.search(r"the KV pool is full: task \d+ preempted", two.log_text()), "the log line")


def test_a_preempted_stream_only_pauses(two: ServiceProcess) -> None:
    """Streamed, the same: each completion's chunks add up to its reply alone, its last chunk
    counts 200 tokens, and no chunk is an error."""
    alone = [_post(two, prompt=p, **WATCHED) for p in PROMPTS]
    before = _preempted(two)
    body = {"prompt": PROMPTS, "stream": True, **WATCHED}
    with httpx.stream("POST", f"{two.url}/completion", json=body, timeout=240) as r:
        assert r.status_code == 200, r.read()
        chunks = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: ")]
    assert not [c for c in chunks if "error" in c], chunks
    for i, one in enumerate(alone):
        mine = [c for c in chunks if c.get("index") == i]
        ids = [p["id"] for c in mine for p in c.get("completion_probabilities", [])]
        _assert_same_reply(one, ids, "".join(c["content"] for c in mine))
        assert mine[-1]["stop"] is True and mine[-1]["timings"]["predicted_n"] == 200
    assert _preempted(two) > before


@pytest.fixture(scope="module")
def four(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    with _serve(tmp_path_factory.mktemp("preempt-4"), 4) as p:
        yield p


@pytest.mark.parametrize("n_predict", [[70, 70, 70, 70], [90, 90, 40, 90], [90, 90, 40, 75]])
def test_llama_servers_unified_sets_all_succeed(four: ServiceProcess, n_predict: list[int]) -> None:
    """llama-server's ``test_completion_unified`` (256 cells, 4 slots, prompt "A"), whose sets it
    answers partly with 500s: four requests at once all answer 200 with ``n_predict`` tokens."""
    with ThreadPoolExecutor(len(n_predict)) as pool:
        answers = list(pool.map(lambda n: _post(four, prompt="A", n_predict=n, **GREEDY), n_predict))
    assert [a["timings"]["predicted_n"] for a in answers] == n_predict


def test_four_prompts_at_once_over_the_pool_are_preempted_and_all_finish(four: ServiceProcess) -> None:
    """The same four, queued together (several prompts in one request, so they surely run side by
    side): 4 x 72 cells in a pool of 256, so at least one is preempted; all 70 tokens come, the
    reply "A" has alone."""
    alone = _post(four, prompt="A", n_predict=70, n_probs=2, **GREEDY)
    before = _preempted(four)
    answers = _post(four, prompt=["A"] * 4, n_predict=70, n_probs=2, **GREEDY)
    assert [a["timings"]["predicted_n"] for a in answers] == [70] * 4
    for got in answers:
        _assert_same_reply(alone, _ids(got), got["content"])
    assert _preempted(four) > before
