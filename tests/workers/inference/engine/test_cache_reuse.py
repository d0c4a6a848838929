"""llama-server's ``--cache-reuse`` / ``n_cache_reuse``: cached runs that the new prompt has after the common
prefix are shifted into place (``llama_memory_seq_add``: their positions move, RoPE follows) rather than
evaluated again; as in llama-server's ``update_slots``, a run must be at least ``n_cache_reuse`` tokens."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from workers.inference.engine._slots import reusable_chunks


def test_runs_after_the_prefix_are_found_in_order_and_short_ones_skipped() -> None:
    cache = [1, 2, 3, 10, 11, 12, 13, 20, 21, 22, 23, 24, 30, 31]
    prompt = [1, 2, 3, 20, 21, 22, 23, 24, 30, 31, 99]  # the 10.. run was cut out of the conversation
    assert reusable_chunks(cache, prompt, 3, 4) == [(7, 3, 7)]  # 20..31: one run of 7
    assert reusable_chunks(cache, prompt, 3, 8) == []  # shorter than asked for
    # Runs are taken in the cache's order: 20.. comes before 30.. in the cache, after it in the prompt.
    assert reusable_chunks(cache, [1, 2, 3, 30, 31, 20, 21, 22, 23], 3, 2) == [(12, 3, 2)]
    # A run found moves the prompt's head: what follows must come after it in the cache too.
    assert reusable_chunks([5, 6, 7, 8, 1, 2, 3, 4], [1, 2, 3, 4, 5, 6, 7, 8], 0, 3) == [(4, 0, 4)]


def complete(url: str, prompt: list[int], **extra: Any) -> dict[str, Any]:
    body = {"prompt": prompt, "n_predict": 2, "temperature": 0, **extra}
    r = httpx.post(f"{url}/completion", json=body, timeout=120)
    assert r.status_code == 200, r.text
    return dict(r.json())


X, Y, Z = list(range(10, 50)), list(range(60, 90)), list(range(100, 160))  # the tiny vocabulary has 262


@pytest.mark.timeout(180)
def test_a_cut_out_middle_keeps_the_rest_cached(spawn_worker: Any, tiny_gguf: Path) -> None:
    # No RAM prompt cache: it would bring X + Z back whole the second time, and hide what reuse does.
    url = spawn_worker(tiny_gguf, "--n-ctx", "1024", "--n-parallel", "1", "--cache-ram", "0").wait_ready()
    complete(url, X + Y + Z)
    plain = complete(url, X + Z)  # without reuse: only X is cached
    assert plain["timings"]["cache_n"] == len(X), plain["timings"]
    complete(url, X + Y + Z)
    reused = complete(url, X + Z, n_cache_reuse=16)
    assert reused["timings"]["cache_n"] == len(X) + len(Z) - 1, reused["timings"]  # the last: for its logits
    assert reused["timings"]["prompt_n"] == 1
    complete(url, X + Y + Z)
    too_short = complete(url, X + Z, n_cache_reuse=len(Z) + 1)  # Z is shorter than that
    assert too_short["timings"]["cache_n"] == len(X)
    bad = httpx.post(f"{url}/completion", json={"prompt": "x", "n_cache_reuse": -1}, timeout=60)
    assert bad.status_code == 400 and "'n_cache_reuse' must be an integer >= 0" in bad.text
