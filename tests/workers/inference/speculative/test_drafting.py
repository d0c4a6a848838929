"""ngram-simple against llama.cpp's function, the adaptive governor's rules and the speculator's chain (pure)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from hypothesis import given
from hypothesis import strategies as st

from workers.inference.speculative import SHORT_NGRAMS, DraftGovernor, NgramSimple, Speculator, ngram_simple_draft
from workers.inference.speculative._adaptive import MAX_COOLDOWN, RETRY_DRAFT


def reference(tokens: list[int], sampled: int, n: int, m: int) -> list[int]:
    """llama.cpp's loop, written the slow obvious way: the latest j > 0 whose n-gram is the pattern."""
    if len(tokens) <= n + m + 1:
        return []
    pattern = [*tokens[len(tokens) - n + 1 :], sampled]
    found = [j for j in range(1, len(tokens) - n) if tokens[j : j + n] == pattern]
    if not found:
        return []
    j = found[-1]
    copy = min(m, len(tokens) - (j + n))
    return tokens[j + n : j + n + copy] if copy >= n else []


def test_a_repeated_block_is_drafted_from_its_earlier_copy() -> None:
    block = list(range(10, 40))
    tokens = [1, *block, 2, *block[:12]]
    # The last 11 tokens and the sampled one (block[12]) match the first copy: what followed it is drafted.
    assert ngram_simple_draft(tokens, block[12], 12, 16) == block[13:29]
    assert ngram_simple_draft(tokens, 99, 12, 16) == []  # the sampled token breaks the pattern


def test_with_a_fallback_a_shorter_n_gram_drafts_where_the_long_one_finds_nothing() -> None:
    """After a token the source does not have (a new value), the 12-gram ending there is found nowhere;
    the 3-gram is, and what followed it is drafted. llama.cpp's lookup alone drafts nothing."""
    source = list(range(10, 70))
    tokens = [1, *source, 2, *source[:20], 999, *source[21:23]]  # 999 where the source has source[20]
    sampled = source[23]
    assert ngram_simple_draft(tokens, sampled, 12, 16) == []
    assert NgramSimple(12, 16).draft(0, tokens, sampled, 16) == []
    fallback = NgramSimple(12, 16, fallback=SHORT_NGRAMS)
    assert fallback.draft(0, tokens, sampled, 16) == source[24:40]
    assert fallback.draft(0, tokens, sampled, 5) == source[24:29]  # cut to the room, as any draft
    assert fallback.draft(0, tokens, 7777, 16) == []  # no n-gram of any size ends with an unseen token
    assert NgramSimple(4, 16, fallback=SHORT_NGRAMS).draft(0, tokens, sampled, 16) == source[24:40]


def test_the_shorter_n_grams_are_looked_up_only_for_a_sequence_generating_alone() -> None:
    """Beside other generating slots a drafted row costs more than the weaker guesses earn: the 12-gram
    still drafts there, the shorter lookups do not."""
    source = list(range(10, 70))
    broken = [1, *source, 2, *source[:20], 999, *source[21:23]]
    fallback = NgramSimple(12, 16, fallback=SHORT_NGRAMS)
    assert fallback.draft(0, broken, source[23], 16, alone=False) == []
    assert fallback.draft(0, broken, source[23], 16, alone=True) == source[24:40]
    whole = [1, *source, 2, *source[:22]]
    assert fallback.draft(0, whole, source[22], 16, alone=False) == source[23:39]


def test_too_short_a_history_or_tail_drafts_nothing() -> None:
    assert ngram_simple_draft([1, 2, 3], 4, 12, 48) == []
    tokens = [0, *range(100, 112), *range(200, 250), *range(100, 111)]
    assert ngram_simple_draft(tokens, 111, 12, 48) == list(range(200, 248))
    # A continuation shorter than n drafts nothing (llama.cpp's copy_max < n_draft_min), so with m < n
    # ngram-simple never drafts: llama.cpp's quirk, kept.
    assert ngram_simple_draft(tokens, 111, 12, 8) == []
    near_end = [0, *range(300, 340), *range(100, 112), *range(500, 511), *range(100, 111)]
    assert ngram_simple_draft(near_end, 111, 12, 48) == list(range(500, 511)) + list(range(100, 111))


@given(
    st.lists(st.integers(0, 4), min_size=0, max_size=80),
    st.integers(0, 4),
    st.integers(1, 5),
    st.integers(1, 8),
)
def test_the_port_is_llama_cpp_s_loop(tokens: list[int], sampled: int, n: int, m: int) -> None:
    assert ngram_simple_draft(tokens, sampled, n, m) == reference(tokens, sampled, n, m)


def test_the_governor_grows_on_hits_and_backs_off_on_misses() -> None:
    g = DraftGovernor(48)
    assert g.allowed() == 48
    g.record(48, 3)  # a partial hit: twice what stood
    assert g.allowed() == 6
    g.record(6, 6)  # all of it: twice the limit
    assert g.allowed() == 12
    g.record(12, 0)  # a miss from the first token: a quarter
    assert g.allowed() == 3
    g.record(3, 0)  # at zero: a cool-down of one step, then a short try
    assert [g.allowed(), g.allowed()] == [0, RETRY_DRAFT]
    g.record(RETRY_DRAFT, 0)
    assert [g.allowed(), g.allowed(), g.allowed()] == [0, 0, RETRY_DRAFT]  # twice as long
    for _ in range(20):
        g.record(RETRY_DRAFT, 0)
        while g.allowed() == 0:
            pass
    assert g.backoff == MAX_COOLDOWN  # bounded
    g.record(RETRY_DRAFT, 1)
    assert g.backoff == 0 and g.allowed() == RETRY_DRAFT


@dataclass
class Fixed:
    """A drafter that proposes what it was given, and remembers what it was told."""

    proposal: list[int]
    name: str = "fixed"
    accepted: list[tuple[int, int]] = field(default_factory=list)
    begun: list[int] = field(default_factory=list)
    alone: list[bool] = field(default_factory=list)  # each draft call's

    @property
    def n_max(self) -> int:
        return 16

    def begin(self, seq: int, prompt: Sequence[int]) -> None:
        self.begun.append(seq)

    def draft(self, seq: int, history: Sequence[int], last: int, n_max: int, *, alone: bool = True) -> list[int]:
        self.alone.append(alone)
        return self.proposal[:n_max]

    def accept(self, seq: int, n_accepted: int) -> None:
        self.accepted.append((seq, n_accepted))


def test_the_first_drafter_with_a_proposal_wins_and_hears_the_outcome() -> None:
    empty, full = Fixed([]), Fixed(list(range(20)))
    spec = Speculator([empty, full], n_seq=2)
    spec.begin(1, request_id=7, prompt=[1, 2])
    spec.begin(1, request_id=7, prompt=[1, 2])  # once per request
    assert full.begun == [1]
    assert spec.draft(1, [1, 2], 3, room=5) == [0, 1, 2, 3, 4]  # cut to the room
    spec.accept(1, 5, 2)
    assert full.accepted == [(1, 2)] and empty.accepted == []
    assert spec.draft(1, [1, 2], 3, room=50, alone=False) == list(range(4))  # the governor: twice the 2 that stood
    assert (spec.stats[1].drafts, spec.stats[1].drafted, spec.stats[1].accepted) == (1, 5, 2)
    assert full.alone == [True, False], "whether the sequence generates alone reaches the drafters"


def test_without_adaptive_drafting_the_room_is_the_limit() -> None:
    spec = Speculator([NgramSimple(2, 4)], n_seq=1, adaptive=False)
    history = [9, 1, 2, 3, 4, 5, 6, 1, 2, 3, 4, 5, 6, 1]
    for _ in range(5):
        spec.accept(0, 4, 0)  # misses would silence an adaptive slot
    assert spec.draft(0, history, 2, room=3) == [3, 4, 5]


def test_a_shorter_history_begins_the_drafters_again() -> None:
    """A context shift drops tokens from the front: drafters that count on a growing history start over."""
    fixed = Fixed([5])
    spec = Speculator([fixed], n_seq=1)
    spec.begin(0, request_id=1, prompt=[1, 2, 3])
    spec.draft(0, [1, 2, 3, 4, 5, 6], 7, room=4)
    spec.draft(0, [4, 5, 6, 7], 8, room=4)
    assert fixed.begun == [0, 0]


def test_a_drafting_head_is_refused_with_the_reason() -> None:
    import pytest

    from service.core.launch import InferenceLaunch
    from workers.inference.speculative import UnsupportedSpeculation, make_speculator

    for head in ("draft-eagle3", "draft-mtp", "draft-dflash", "draft-dspark"):
        with pytest.raises(UnsupportedSpeculation, match="outside its C API"):
            make_speculator(InferenceLaunch.from_argv(["--spec-type", head]), 4)
