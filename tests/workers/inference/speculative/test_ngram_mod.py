"""``ngram-mod`` (``_ngram_mod``): cases worked by hand from ``common/ngram-mod.cpp`` and
``common_speculative_impl_ngram_mod``, and properties of any draft. With ``n_match`` 1 an n-gram's
hash is its token, so its slot is the token modulo the table's size."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from workers.inference.speculative._ngram_hash import MASK64
from workers.inference.speculative._ngram_mod import EMPTY, FACTOR, TABLE_SIZE, NgramMod, NgramModTable

PROMPT = [1, 2, 3, 4, 5, 1]  # n = 2: [1,2]->3, [2,3]->4, [3,4]->5, [4,5]->1 ([5,1] has no successor)


def test_the_slot_is_llama_cpps_64_bit_hash_modulo_the_size() -> None:
    table = NgramModTable(2, 1000)
    assert table.idx([7, 9]) == ((7 * FACTOR + 9) & MASK64) % 1000
    assert NgramModTable(1, 8).idx([13]) == 5
    assert NgramModTable(1, 8).idx([-1]) == MASK64 % 8  # a negative token wraps as in C


def test_a_slot_keeps_the_last_token_added_and_collisions_overwrite() -> None:
    table = NgramModTable(1, 8)
    table.add([1, 5])
    table.add([9, 6])  # 9 % 8 == 1: the same slot
    assert (table.get([1]), table.get([9]), table.get([2]), table.used) == (6, 6, EMPTY, 1)
    table.reset()
    assert (table.get([1]), table.used) == (EMPTY, 0)


def test_a_draft_follows_the_table_from_the_last_n_tokens() -> None:
    d = NgramMod(2, 4, 2, size=1 << 16)
    d.begin(0, PROMPT)
    assert d.draft(0, PROMPT, 2, 64) == [3, 4, 5, 1]  # from [1, 2], up to n_max
    assert d.draft(0, PROMPT, 2, 3) == [3, 4, 5]  # the engine's limit
    assert (d.n_max, d.name, d.state(0).n_draft_last) == (4, "ngram-mod", 4)


def test_a_chain_shorter_than_n_min_is_no_draft() -> None:
    d = NgramMod(2, 4, 2, size=1 << 16)
    d.begin(0, PROMPT)
    assert d.draft(0, [1, 2, 3, 4], 5, 64) == []  # [4,5] -> 1, then [5,1] is empty: 1 < n_min
    assert d.state(0).n_draft_last == 0
    lax = NgramMod(2, 4, 1, size=1 << 16)
    lax.begin(0, PROMPT)
    assert lax.draft(0, [1, 2, 3, 4], 5, 64) == [1]


def test_a_history_shorter_than_n_match_drafts_nothing() -> None:
    d = NgramMod(2, 4, 0, size=1 << 16)
    d.begin(0, PROMPT)
    assert d.draft(0, [9, 1], 2, 64) == [3, 4, 5, 1]
    assert d.draft(0, [1], 2, 64) == []  # llama.cpp wants n_match tokens, though it reads n_match - 1


def test_a_draft_adds_the_history_in_chunks_of_more_than_32_tokens() -> None:
    d = NgramMod(1, 4, 1, size=1 << 10)
    assert d.draft(0, [7, 8] * 16, 7, 64) == []  # 32 new tokens: not added yet
    assert d.draft(0, [*[7, 8] * 16, 7], 8, 64) == [7, 8, 7, 8]  # 33: the n-grams but the last one
    assert d.state(0).i_last == 32


def test_the_table_is_shared_by_the_sequences() -> None:
    d = NgramMod(2, 4, 2, size=1 << 16)
    d.begin(0, PROMPT)
    assert d.draft(1, [9, 1], 2, 64) == [3, 4, 5, 1]


def test_begin_empties_a_table_more_than_a_quarter_full() -> None:
    d = NgramMod(1, 4, 1, size=8)
    d.begin(0, [0, 1, 2])  # slots 0 and 1: a quarter, kept
    assert d.table.used == 2
    d.begin(0, [3, 4])  # a third slot: 3/8 > 0.25
    assert d.table.used == 0
    assert d.state(0).i_last == 1


def test_five_poorly_accepted_drafts_in_a_row_empty_the_table() -> None:
    d = NgramMod(2, 4, 2, size=1 << 16)
    d.begin(0, PROMPT)
    assert d.draft(0, PROMPT, 2, 64) == [3, 4, 5, 1]
    for _ in range(4):
        d.accept(0, 0)
    d.accept(0, 1)  # 1/4 is not under a quarter: the streak ends
    assert d.state(0).n_low == 0
    for _ in range(5):
        d.accept(0, 0)
    assert (d.table.used, d.state(0).i_last, d.state(0).n_low) == (0, 0, 0)


def test_no_draft_no_count() -> None:
    d = NgramMod(2, 4, 2, size=1 << 16)
    for _ in range(6):
        d.accept(0, 0)
    assert d.state(0).n_low == 0


def test_llama_cpps_table_has_4m_slots() -> None:
    assert TABLE_SIZE == 4 * 1024 * 1024
    assert len(NgramMod().table.entries) == TABLE_SIZE


@given(
    st.integers(1, 4),
    st.integers(0, 10),
    st.integers(0, 12),
    st.lists(st.integers(0, 4), max_size=150),
    st.lists(st.integers(0, 4), min_size=1, max_size=30),
)
def test_a_draft_has_n_min_to_n_max_tokens_of_the_history(
    n_match: int, n_max: int, n_min: int, prompt: list[int], sampled: list[int]
) -> None:
    d = NgramMod(n_match, n_max, n_min, size=1 << 12)
    d.begin(0, prompt)
    history = list(prompt)
    for last in sampled:
        got = d.draft(0, history, last, 64)
        assert len(got) <= n_max
        assert not got or len(got) == n_max or len(got) >= n_min
        assert set(got) <= set(history)
        history.append(last)
