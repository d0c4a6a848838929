"""``ngram-cache`` (``_ngram_cache``): cases worked by hand from ``common/ngram-cache.cpp`` and
``common_speculative_impl_ngram_cache``, the lookup cache files, and properties of any draft."""

from __future__ import annotations

import re
import struct
import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from workers.inference.speculative._ngram_cache import (
    N_DRAFT,
    LookupCache,
    LookupCacheError,
    NgramCache,
    ngram_cache_draft,
    ngram_cache_load,
    ngram_cache_save,
    ngram_cache_update,
)

N = -1  # LLAMA_TOKEN_NULL: an n-gram's unused places


def _draft(inp: list[int], context: LookupCache, dynamic: LookupCache, static: LookupCache) -> list[int]:
    return ngram_cache_draft(inp, N_DRAFT, 1, 4, context, dynamic, static)


def test_update_counts_each_token_after_its_n_grams() -> None:
    cache: LookupCache = {}
    ngram_cache_update(cache, 1, 2, [1, 2, 1, 2, 3], 5)
    assert cache == {
        (1, N, N, N): {2: 2},
        (2, N, N, N): {1: 1, 3: 1},
        (1, 2, N, N): {1: 1, 3: 1},
        (2, 1, N, N): {2: 1},
    }
    ngram_cache_update(cache, 1, 2, [1, 2, 1, 2, 3, 3], 1)  # the last token only
    assert cache[(3, N, N, N)] == {3: 1}
    assert cache[(2, 3, N, N)] == {3: 1}


def test_the_static_cache_drafts_its_most_frequent_token() -> None:
    assert _draft([9, 1, 2], {}, {}, {(1, 2, N, N): {7: 3, 8: 1}}) == [7]  # then (2, 7) is unknown
    assert _draft([9, 1, 2], {}, {}, {(1, 2, N, N): {7: 1}}) == []  # seen once: under 2
    assert _draft([9, 1, 2], {}, {}, {(1, 2, N, N): {7: 2, 8: 1, 9: 1}}) == [7]  # 50%
    assert _draft([9, 1, 2], {}, {}, {(1, 2, N, N): {7: 1, 8: 1, 9: 1}}) == []  # 33%


def test_the_longest_context_n_gram_is_tried_first() -> None:
    context = {(2, N, N, N): {5: 2}, (1, 2, N, N): {6: 2}}
    assert _draft([9, 1, 2], context, {}, {}) == [6]


def test_the_dynamic_cache_asks_for_more_samples() -> None:
    assert _draft([9, 1, 2], {}, {(2, N, N, N): {5: 3}}, {}) == []  # 3 < 4 for a 1-gram
    assert _draft([9, 1, 2], {}, {(2, N, N, N): {5: 4}}, {}) == [5]


def test_static_counts_weight_the_context_and_can_spoil_its_draft() -> None:
    context = {(2, N, N, N): {5: 2, 6: 1}}
    assert _draft([9, 1, 2], context, {}, {}) == [5]  # 2 of 3: 66%
    # (1, 2) was followed by 6 in the corpus: 6 weighs 100, wins, and 1 of 3 is too few
    assert _draft([9, 1, 2], context, {}, {(1, 2, N, N): {6: 1}}) == []


def test_a_draft_chains_up_to_8_tokens() -> None:
    d = NgramCache()
    history = [1, 2, 3, 1, 2, 3, 1, 2]
    assert d.draft(0, history, 3, 64) == [1, 2, 3, 1, 2, 3, 1, 2]
    assert d.draft(0, history, 3, 3) == [1, 2, 3]
    assert (d.n_max, d.name) == (8, "ngram-cache")


def test_an_input_of_one_token_drafts_nothing_and_n_grams_before_the_start_are_null() -> None:
    static = {(1, 2, N, N): {7: 2}}
    assert NgramCache(static=static).draft(0, [], 1, 8) == []
    assert NgramCache(static=static).draft(0, [1], 2, 8) == [7]


def test_the_context_outlives_requests_and_misses_n_grams_across_calls() -> None:
    d = NgramCache()
    d.draft(0, [5, 6], 7, 8)  # counts [5, 6, 7]: its n-grams
    assert d.state(0).cache_size == 3
    d.begin(0, [1])  # a no-op, as llama.cpp's
    d.draft(0, [5, 6, 7, 8], 9, 8)  # only [8, 9] is new: (7) -> 8 and (6, 7) -> 8 are never counted
    context = d.state(0).context
    assert (8, N, N, N) in context
    assert (7, N, N, N) not in context
    assert d.state(0).cache_size == 5
    d.draft(0, [1, 2], 3, 8)  # shorter than what was counted: nothing new is
    assert d.state(0).cache_size == 5
    assert (2, N, N, N) not in context


def test_sequences_have_their_own_context() -> None:
    d = NgramCache()
    d.draft(0, [1, 2, 3, 1, 2, 3, 1, 2], 3, 8)
    assert d.draft(1, [1, 2], 3, 8) == []


def test_a_saved_cache_loads_as_it_was_and_drafts_the_same(tmp_path: Path) -> None:
    cache: LookupCache = {}
    ngram_cache_update(cache, 2, 2, [4, 5, 6, 4, 5, 6, 4, 5, 7, 1, 2, 3], 12)
    ngram_cache_save(cache, tmp_path / "static.bin")
    loaded = ngram_cache_load(tmp_path / "static.bin")
    assert loaded == cache
    assert list(loaded) == list(cache)
    history = [9, 4]
    assert NgramCache(static=loaded).draft(0, history, 5, 8) == NgramCache(static=cache).draft(0, history, 5, 8)
    assert NgramCache(static=loaded).draft(0, history, 5, 8) == [6, 4, 5, 6, 4, 5, 6, 4]  # (4,5), (5,6), (6,4)...


def test_the_file_format_is_llama_cpps(tmp_path: Path) -> None:
    path = tmp_path / "lookup.bin"
    ngram_cache_save({(1, 2, N, N): {7: 3, 8: 1}}, path)
    assert path.read_bytes() == struct.pack("<4ii4i", 1, 2, -1, -1, 2, 7, 3, 8, 1)


RECORD = struct.pack("<4ii2i", 1, 2, -1, -1, 1, 7, 3)


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (RECORD + struct.pack("<4i", 3, 4, -1, -1), "byte 28: the file ends before its number of tokens"),
        (RECORD + struct.pack("<4ii", 3, 4, -1, -1, 0), "byte 28: it has 0 tokens"),
        (struct.pack("<4ii2i", 1, 2, -1, -1, 1, 7, 0), "byte 0: token 7 has count 0"),
        (struct.pack("<4ii2ii", 1, 2, -1, -1, 2, 7, 3, 8), "byte 0: the file ends inside its 2 tokens"),
    ],
)
def test_a_corrupt_file_says_what_and_where(tmp_path: Path, data: bytes, why: str) -> None:
    path = tmp_path / "bad.bin"
    path.write_bytes(data)
    with pytest.raises(LookupCacheError, match=re.escape(f"{path} is corrupt: the n-gram at {why}")):
        ngram_cache_load(path)


def test_a_missing_file_says_so(tmp_path: Path) -> None:
    with pytest.raises(LookupCacheError, match=r"nowhere\.bin: cannot be read"):
        ngram_cache_load(tmp_path / "nowhere.bin")


def test_what_llama_cpps_reader_lets_pass(tmp_path: Path) -> None:
    path = tmp_path / "lookup.bin"
    path.write_bytes(RECORD + b"\x00" * 15)  # a tail shorter than an n-gram is not read
    assert ngram_cache_load(path) == {(1, 2, N, N): {7: 3}}
    path.write_bytes(RECORD + struct.pack("<4ii2i", 1, 2, -1, -1, 1, 8, 5))  # a repeated n-gram: the first stands
    assert ngram_cache_load(path) == {(1, 2, N, N): {7: 3}}
    path.write_bytes(b"")
    assert ngram_cache_load(path) == {}


tokens = st.integers(-(2**31), 2**31 - 1)
caches = st.dictionaries(
    st.tuples(tokens, tokens, tokens, tokens),
    st.dictionaries(tokens, st.integers(1, 2**31 - 1), min_size=1, max_size=5),
    max_size=20,
)


@given(caches)
def test_save_then_load_is_the_same_cache(cache: LookupCache) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "c.bin"
        ngram_cache_save(cache, path)
        loaded = ngram_cache_load(path)
    assert loaded == cache
    assert [list(part) for part in loaded.values()] == [list(part) for part in cache.values()]


@given(st.lists(st.integers(0, 3), max_size=80), st.lists(st.integers(0, 3), min_size=1, max_size=30))
def test_a_context_draft_is_at_most_8_tokens_the_sequence_has_had(prompt: list[int], sampled: list[int]) -> None:
    d = NgramCache()
    history = list(prompt)
    for last in sampled:
        got = d.draft(0, history, last, 64)
        assert len(got) <= N_DRAFT
        assert set(got) <= {*history, last}
        history.append(last)
