"""Busy slots kept side by side (engine._compaction): llama.cpp decodes only consecutive sequence ids
in one ubatch, so a gap between running slots costs a second pass over the weights every step.

The pure rule first, then a real worker: three requests started while the only cached prompt sits
in slot 1 take slots 0, 2 and 3 by llama-server's rule (empty slots first); one of them moves into
slot 1, and every reply is the one it gets alone (a stream copied wrongly would change it).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from devtools.tiny_gguf import write_tiny_gguf
from tests.eventually import eventually
from workers.inference.engine._compaction import compaction_moves

T, F = True, False


def test_the_highest_running_slot_moves_into_the_lowest_gap_until_they_make_one_run() -> None:
    assert compaction_moves([T, F, T, T], [T, F, T, T]) == [(3, 1)]
    assert compaction_moves([T, F, F, T], [T, F, F, T]) == [(3, 1)]
    assert compaction_moves([F, T, F, T], [F, T, F, T]) == [(3, 2)]
    assert compaction_moves([T, F, F, T, F, T], [T, F, F, T, F, T]) == [(5, 1), (3, 2)]
    assert compaction_moves([T, T, T, F], [T, T, T, F]) == [], "already side by side"
    assert compaction_moves([F, F, F, F], [F, F, F, F]) == []


def test_a_slot_that_may_not_move_stays_and_the_other_end_moves_instead() -> None:
    assert compaction_moves([T, F, T, T], [T, F, T, F]) == [(0, 1)], "slot 3 named by its request"
    assert compaction_moves([T, F, T], [F, F, F]) == [], "nothing may move: the gap stays"


@pytest.fixture(scope="module")
def gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # a context of its own over 1,500 tokens: each reply runs its whole length, not 256 tokens (~50 ms)
    return write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf", seed=11, n_ctx=4096)


def complete(url: str, prompt: str, **extra: Any) -> dict[str, Any]:
    body = {"prompt": prompt, "n_predict": N_PREDICT, "temperature": 0, "ignore_eos": True, **extra}
    r = httpx.post(f"{url}/completion", json=body, timeout=120)
    assert r.status_code == 200, r.text
    answer: dict[str, Any] = r.json()
    return answer


def running(url: str) -> int:
    return sum(s["is_processing"] for s in httpx.get(f"{url}/slots", timeout=30).json())


N_PREDICT = 1500  # long enough that all three run together
KEPT = 256  # tokens of each reply compared with the reply alone
PROMPTS = ["The first of three long replies", "Then a second one, in the next slot", "And a third: it moves"]


@pytest.mark.timeout(180)
def test_running_requests_move_beside_each_other_and_answer_as_they_would_alone(spawn_worker: Any, gguf: Path) -> None:
    url = spawn_worker(gguf, "--n-ctx", "8192", "--n-parallel", "4").wait_ready()
    assert complete(url, "warm up", n_predict=2, id_slot=1)["id_slot"] == 1  # the one cached prompt: slot 1
    # Started one after another, each running before the next: llama-server's rule (empty slots first)
    # puts them in 0, 2 and 3; the second moves into 1 at once, the third into 2.
    together: list[dict[str, Any]] = []
    with ThreadPoolExecutor(len(PROMPTS)) as pool:
        futures = []
        for k, prompt in enumerate(PROMPTS, start=1):
            futures.append(pool.submit(complete, url, prompt, return_tokens=True))
            eventually(lambda k=k: running(url) == k, f"{k} running", timeout=60, interval=0.005)
        together = [f.result() for f in futures]
    assert [r["id_slot"] for r in together] == [0, 1, 2], "the running slots side by side"
    metrics = httpx.get(f"{url}/metrics", timeout=30).text.splitlines()
    assert "modelrouter:slot_moves_total 2" in metrics
    # A stream copied wrongly changes its reply from the move on (its first few tokens); far later, a near
    # tie between two tokens of this random model may fall either way in a batch of three or of one.
    alone = [tuple(complete(url, p, return_tokens=True)["tokens"][:KEPT]) for p in PROMPTS]
    assert [tuple(r["tokens"][:KEPT]) for r in together] == alone, "a moved reply goes on as it would have"
    assert len(set(alone)) == len(alone), "the replies differ: a reply swapped between slots would show"
