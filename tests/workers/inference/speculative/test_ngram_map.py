"""``ngram-map-k`` and ``ngram-map-k4v`` (``_ngram_map``): cases worked by hand from
``common/ngram-map.cpp``, and properties of any draft. (``test_against_llama_cpp`` runs the same
sessions through llama.cpp's own code.)"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from workers.inference.speculative._ngram_map import NgramMap, NgramMapK, ngram_map_begin, ngram_map_draft

# n = 2, m = 3: a draft needs 2n + m = 7 tokens; an n-gram may start at 1 .. cur_len - n - m - 1.
HISTORY = [5, 1, 2, 7, 8, 9, 3, 4, 1]  # then 2 is sampled: the key is [1, 2], found at 1


def test_k_drafts_the_m_tokens_after_the_latest_earlier_match() -> None:
    d = NgramMapK(2, 3)
    d.begin(0, HISTORY)
    assert d.draft(0, HISTORY, 2, 48) == [7, 8, 9]
    assert d.n_max == 3
    assert d.name == "ngram-map-k"


def test_without_begin_the_whole_history_is_searched_too() -> None:
    assert NgramMapK(2, 3).draft(0, HISTORY, 2, 48) == [7, 8, 9]


def test_too_short_a_history_drafts_nothing() -> None:
    assert NgramMapK(2, 3).draft(0, HISTORY[:6], 2, 48) == []  # 6 < 2n + m


def test_position_0_never_matches() -> None:
    # [1, 2] starts at 0 only: llama.cpp's searches stop above 0
    assert NgramMapK(2, 3).draft(0, [1, 2, 7, 8, 9, 3, 1], 2, 48) == []


def test_a_match_must_leave_room_for_the_m_gram_and_the_key() -> None:
    # cur_len 8: n-grams start at most at 8 - 2 - 3 - 1 = 2; [1, 2] at 3 is too late
    assert NgramMapK(2, 3).draft(0, [5, 6, 6, 1, 2, 8, 9, 1], 2, 48) == []
    assert NgramMapK(2, 3).draft(0, [5, 6, 1, 2, 7, 8, 9, 1], 2, 48) == [7, 8, 9]


def test_n_max_cuts_the_draft() -> None:
    assert NgramMapK(2, 3).draft(0, HISTORY, 2, 2) == [7, 8]
    assert NgramMapK(2, 3).draft(0, HISTORY, 2, 0) == []


def test_a_key_drafts_no_more_than_was_accepted_of_its_last_draft() -> None:
    d = NgramMapK(2, 3)
    d.begin(0, HISTORY)
    assert d.draft(0, HISTORY, 2, 48) == [7, 8, 9]
    d.accept(0, 1)
    later = [*HISTORY, 2, 1]  # the key [1, 2] again: the hash map finds it at 1
    assert d.draft(0, later, 2, 48) == [7]
    d.accept(0, 0)
    assert d.draft(0, [*later, 2, 1], 2, 48) == []  # llama.cpp's: a key with 0 accepted drafts nothing after
    assert d.state(0).keys[0].key_num == 3


def test_sequences_keep_their_own_maps() -> None:
    d = NgramMapK(2, 3)
    assert d.draft(0, HISTORY, 2, 48) == [7, 8, 9]
    d.accept(0, 0)
    assert d.draft(1, HISTORY, 2, 48) == [7, 8, 9]
    assert d.draft(0, [*HISTORY, 2, 1], 2, 48) == []


# n = 1, m = 2: the key is the sampled token alone.
K4V = [0, 5, 1, 2, 5, 1, 2, 5, 3, 4, 9, 9]  # then 5: found at 7; after 5 came [1, 2] twice, [3, 4] once


def test_k4v_counts_the_m_grams_after_the_key_and_drafts_after_the_match() -> None:
    d = NgramMapK(1, 2, min_hits=1, key_only=False)
    assert d.name == "ngram-map-k4v"
    # [1, 2] dominates (2 against 1), yet llama.cpp drafts the tokens after the match itself
    assert d.draft(0, K4V, 5, 48) == [3, 4]
    (key,) = d.state(0).keys
    assert [(v.value_idx, v.value_num) for v in key.values] == [(2, 2), (8, 1), (0, 0), (0, 0)]
    assert (key.key_idx, key.stat_idx, key.key_num) == (7, 7, 1)


def test_k4v_waits_for_min_hits() -> None:
    d = NgramMapK(1, 2, min_hits=2, key_only=False)
    assert d.draft(0, K4V, 5, 48) == []
    assert d.state(0).keys[0].values[0].value_idx == 0  # not counted before the hits
    assert d.draft(0, [*K4V, 5, 0], 5, 48) == [3, 4]


def test_k4v_drafts_nothing_when_no_m_gram_dominates() -> None:
    # after 5: [1, 2] once, [3, 4] once: 1 < 2 * 1
    assert NgramMapK(1, 2, key_only=False).draft(0, [0, 5, 1, 2, 5, 3, 4, 9, 9], 5, 48) == []


def test_k4v_counts_the_match_at_stat_idx_again() -> None:
    d = NgramMapK(1, 2, key_only=False)
    assert d.draft(0, K4V, 5, 48) == [3, 4]
    # the same match (7) next step: [3, 4] is counted a second time (llama.cpp's loop runs to <= match_pos)
    assert d.draft(0, [*K4V, 5], 5, 48) == []
    assert [v.value_num for v in d.state(0).keys[0].values] == [2, 2, 0, 0]


def test_k4v_counts_four_different_m_grams_at_most() -> None:
    history = [0, 5, 1, 5, 2, 5, 3, 5, 4, 5, 6, 9, 9, 9]  # five different tokens after 5 (m = 1)
    d = NgramMapK(1, 1, key_only=False)
    d.draft(0, history, 5, 48)
    assert [(v.value_idx, v.value_num) for v in d.state(0).keys[0].values] == [(2, 1), (4, 1), (6, 1), (8, 1)]


def test_min_hits_is_kept_in_16_bits() -> None:
    assert NgramMap(1, 1, False, 65536).min_hits == 0
    assert NgramMap(1, 1, False, 65537).min_hits == 1


def test_begin_with_a_shorter_prompt_forgets_what_lies_past_it() -> None:
    state = NgramMap(2, 3, True, 1)
    ngram_map_begin(state, HISTORY)
    ngram_map_draft(state, HISTORY, 2)
    assert sorted(state.key_map.values()) == [1, 2, 3]
    assert [k.key_idx for k in state.keys] == [1]
    ngram_map_begin(state, HISTORY[:8])  # shrinks the clean-up point to 8 - n - m = 3
    assert sorted(state.key_map.values()) == [1, 2]
    assert (state.key_map_last_idx, [k.key_idx for k in state.keys]) == (2, [1])
    ngram_map_begin(state, HISTORY[:5])  # 5 <= n + m: everything goes
    assert (state.key_map, state.keys, state.key_map_last_idx) == ({}, [], 0)


def test_a_history_shorter_than_at_the_last_draft_is_llama_cpps_abort() -> None:
    d = NgramMapK(2, 3)
    d.draft(0, HISTORY, 2, 48)
    with pytest.raises(RuntimeError, match="fewer than"):
        d.draft(0, HISTORY[:8], 2, 48)


sessions = st.tuples(
    st.integers(1, 4),
    st.integers(1, 5),
    st.booleans(),
    st.lists(st.integers(0, 3), min_size=0, max_size=120),
    st.lists(st.integers(0, 3), min_size=1, max_size=40),
)


@given(sessions)
def test_a_draft_is_the_run_after_an_earlier_occurrence_of_the_key(
    session: tuple[int, int, bool, list[int], list[int]],
) -> None:
    n, m, key_only, prompt, sampled = session
    d = NgramMapK(n, m, min_hits=1, key_only=key_only)
    d.begin(0, prompt)
    history = list(prompt)
    for last in sampled:
        got = d.draft(0, history, last, m)
        key = [*history[len(history) - n + 1 :], last][-n:]
        if got:
            assert len(got) <= m
            starts = [i for i in range(1, len(history)) if history[i - n : i] == key and i >= n]
            assert any(history[i : i + len(got)] == got for i in starts)
            d.accept(0, len(got) // 2)
        history.append(last)
