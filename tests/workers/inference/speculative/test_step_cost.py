"""speculative/_step_cost.py: a slot's draft is not paid for by the slots beside it."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tests.workers.inference.speculative.test_drafting import Fixed
from workers.inference.speculative import Speculator
from workers.inference.speculative._step_cost import share_drafts


def test_with_a_stream_per_slot_no_slot_drafts_beside_one_that_has_no_draft() -> None:
    drafts = [list(range(48)), [], [1, 2, 3], list(range(15))]
    assert share_drafts(drafts, per_stream=True) == [[], [], [], []]
    assert share_drafts(drafts, per_stream=False) == drafts  # one KV pool: any mix of rows is one pass


def test_drafts_stand_when_every_generating_slot_drafts() -> None:
    every = [list(range(48)), [1, 2]]
    assert share_drafts(every, per_stream=True) == every
    assert share_drafts([[], []], per_stream=True) == [[], []]
    assert share_drafts([[7]], per_stream=True) == [[7]]


@given(st.lists(st.lists(st.integers(0, 9), max_size=48), min_size=1, max_size=8), st.booleans())
def test_drafts_stand_whole_or_all_go(drafts: list[list[int]], per_stream: bool) -> None:
    shared = share_drafts(drafts, per_stream=per_stream)
    assert shared == drafts or (per_stream and shared == [[] for _ in drafts])


def test_only_adaptive_drafting_drops_drafts() -> None:
    mixed = [[1, 2, 3], []]
    assert Speculator([Fixed(list(range(20)))], n_seq=2).share(mixed, per_stream=True) == [[], []]
    plain_rule = Speculator([Fixed(list(range(20)))], n_seq=2, adaptive=False)
    assert plain_rule.share(mixed, per_stream=True) == mixed  # --no-spec-adaptive drafts as llama-server
