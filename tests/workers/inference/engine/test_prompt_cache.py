"""llama-server's RAM prompt cache (``--cache-ram``, ``--cache-idle-slots``): its rules on their own,
then in real worker processes with two slots.

The worker scenarios follow llama.cpp's ``tools/server/tests/unit/test_kv_keep_only_active.py``:
a slot that goes idle while another request starts is saved to the cache and, in a unified KV pool,
cleared (``/slots``: ``n_cached`` 0); a later request with its prompt takes it back from RAM
(``timings.cache_n``), where without the cache the prompt would have been lost to a third request.
"""

from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Any

import httpx
import pytest

from devtools.tiny_gguf import write_tiny_gguf
from tests.workers.conftest import WorkerProc
from workers.inference.engine._prompt_cache import MIB, CachedPrompt, PromptCache

NO_LORA: tuple[tuple[int, float], ...] = ()


def entry(tokens: list[int], size: int = 10, lora: tuple[tuple[int, float], ...] = NO_LORA) -> CachedPrompt:
    return CachedPrompt(tokens, lora, (ctypes.c_uint8 * size)())


class TestRules:
    def test_a_prompt_already_held_is_not_copied_again_and_held_prefixes_go(self) -> None:
        cache = PromptCache(1, 0)
        cache.add(entry([1, 2, 3, 4]))
        assert not cache.admits([1, 2, 3], NO_LORA, 10), "a prefix of an entry is in the cache already"
        assert cache.admits([1, 2, 3, 4, 5], NO_LORA, 10)
        assert cache.entries == [], "the entry the new one contains is of no more use"
        cache.add(entry([1, 2, 3, 4, 5]))
        assert cache.admits([1, 2, 3], ((0, 0.5),), 10), "cells of another adapter set are other cells"

    def test_the_size_limit_drops_the_oldest_and_refuses_what_cannot_fit(self) -> None:
        cache = PromptCache(1, 0)
        assert not cache.admits([9], NO_LORA, MIB + 1)
        for first in (1, 2, 3):
            assert cache.admits([first, 7], NO_LORA, MIB // 2)
            cache.add(entry([first, 7], MIB // 2))
        assert [e.tokens[0] for e in cache.entries] == [2, 3] and cache.size == MIB

    def test_the_token_limit_grows_to_what_the_size_limit_holds(self) -> None:
        small = PromptCache(-1, 8)  # no size limit: the context's tokens
        for first in (1, 2, 3):
            small.add(entry([first] * 4))
        assert [e.tokens[0] for e in small.entries] == [2, 3]
        roomy = PromptCache(1, 8)  # 10 bytes a token: 1 MiB holds far more than 8 tokens
        for first in (1, 2, 3):
            roomy.add(entry([first] * 4, 40))
        assert len(roomy.entries) == 3

    def test_an_entry_is_taken_only_if_it_keeps_and_covers_more_than_the_slot(self) -> None:
        cache = PromptCache(-1, 0)
        long_talk, other = list(range(100)), [500, 501, 502, 503]
        cache.add(entry(long_talk))
        cache.add(entry(other))
        assert cache.take_better(long_talk[:80], long_talk[:90], NO_LORA) is None, "the slot covers 80/90 already"
        assert cache.take_better([], long_talk[:10], NO_LORA) is None, "10 of its 100 tokens: under a quarter kept"
        assert cache.take_better([], long_talk[:90], ((0, 1.0),)) is None, "computed with other adapters"
        got = cache.take_better([7, 8, 9], [*long_talk[:60], 999], NO_LORA)
        assert got is not None and got.tokens == long_talk
        assert [e.tokens for e in cache.entries] == [other], "a taken entry leaves the cache"


# -- in a worker --------------------------------------------------------------------------------------

ONE = "Once upon a time in a land far away there lived a knight who crossed mountains and rivers"
TWO = "The quick brown fox jumps over the lazy dog, twice, and then a third time for luck"
THREE = "Rivers, seas and oceans: a short list of the waters a sailor might meet on a long trip"


@pytest.fixture(scope="module")
def gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf")


def complete(url: str, prompt: str, **extra: Any) -> dict[str, Any]:
    body = {"prompt": prompt, "n_predict": 4, "temperature": 0, "cache_prompt": True, **extra}
    r = httpx.post(f"{url}/completion", json=body, timeout=120)
    assert r.status_code == 200, r.text
    return dict(r.json())


def cached(url: str) -> dict[int, int]:
    """``/slots``: the tokens each slot holds."""
    return {s["id"]: s["n_cached"] for s in httpx.get(f"{url}/slots", timeout=30).json()}


def start(spawn_worker: Any, gguf: Path, *extra: str) -> str:
    w: WorkerProc = spawn_worker(gguf, "--n-ctx", "1024", "--n-parallel", "2", *extra)
    return w.wait_ready()


@pytest.mark.timeout(180)
def test_an_idle_slot_leaves_the_pool_for_ram_and_comes_back(spawn_worker: Any, gguf: Path) -> None:
    url = start(spawn_worker, gguf, "--kv-unified")
    a1 = complete(url, ONE)
    b1 = complete(url, TWO)
    assert a1["id_slot"] != b1["id_slot"]
    assert cached(url)[a1["id_slot"]] == 0, "B's start saved A's slot to RAM and cleared it from the pool"
    assert cached(url)[b1["id_slot"]] > 0
    complete(url, THREE)  # takes the empty slot; B's goes to RAM in turn
    a2 = complete(url, ONE)
    assert a2["timings"]["cache_n"] >= a1["tokens_evaluated"] - 1, a2["timings"]  # back from RAM
    assert a2["timings"]["prompt_n"] <= 1 and a2["content"] == a1["content"]


@pytest.mark.timeout(180)
def test_without_the_cache_a_third_prompt_evicts_the_first(spawn_worker: Any, gguf: Path) -> None:
    url = start(spawn_worker, gguf, "--kv-unified", "--cache-ram", "0")
    a1 = complete(url, ONE)
    b1 = complete(url, TWO)
    assert cached(url)[a1["id_slot"]] > 0, "no cache: an idle slot keeps its cells"
    assert cached(url)[b1["id_slot"]] > 0
    complete(url, THREE)  # the least recently used slot, A's
    a2 = complete(url, ONE)
    # Evaluated again, but for what it shares with the prompt of the slot it got (BOS and so on).
    assert a2["timings"]["cache_n"] < a1["tokens_evaluated"] // 4, a2["timings"]
    assert a2["timings"]["prompt_n"] + a2["timings"]["cache_n"] == a1["timings"]["prompt_n"]


@pytest.mark.timeout(180)
@pytest.mark.parametrize("extra", [("--kv-unified", "--no-cache-idle-slots"), ()], ids=["no-idle-slots", "streams"])
def test_idle_slots_keep_their_cells_without_the_switch_or_a_pool(
    spawn_worker: Any, gguf: Path, extra: tuple[str, ...]
) -> None:
    """``--no-cache-idle-slots``; or a KV stream per slot (``-np 2`` without ``--kv-unified``), where
    clearing frees nothing for the others. Either way a prompt lost to another request still
    comes back from RAM: the slot it leaves is saved before it is reused."""
    url = start(spawn_worker, gguf, *extra)
    a1 = complete(url, ONE)
    complete(url, TWO)
    assert cached(url)[a1["id_slot"]] > 0
    complete(url, THREE)  # the least recently used slot, A's: saved to RAM first
    a2 = complete(url, ONE)
    assert a2["timings"]["cache_n"] >= a1["tokens_evaluated"] - 1, a2["timings"]


@pytest.mark.timeout(180)
def test_llama_servers_own_scenario_with_named_slots(spawn_worker: Any, gguf: Path) -> None:
    """llama.cpp's ``test_clear_and_restore``: A in slot 0, B in slot 1 clears slot 0, A again comes
    back from RAM, and a follow-up of A finds its cells in place."""
    url = start(spawn_worker, gguf, "--kv-unified")
    a1 = complete(url, ONE, id_slot=0)
    held = cached(url)
    assert held[0] >= a1["tokens_evaluated"] and held[1] == 0, "slot 0 alone holds cells: nothing to clear"
    complete(url, TWO, id_slot=1)
    assert cached(url)[0] == 0
    a2 = complete(url, ONE)
    assert a2["timings"]["cache_n"] > 0 and a2["timings"]["prompt_n"] < a1["timings"]["prompt_n"]
    follow = complete(url, ONE + " The knight finally reached the castle gates.")
    assert follow["id_slot"] == a2["id_slot"] and follow["timings"]["cache_n"] >= a1["tokens_evaluated"] - 1
