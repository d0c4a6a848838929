"""speculative/_step_cost.py: a drafted row's cost to the slots beside it, fitted from the decodes."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tests.workers.inference.speculative.test_drafting import Fixed
from workers.inference.speculative import Speculator
from workers.inference.speculative._step_cost import OTHERS_SLOWDOWN, StepCost, share_drafts


def _fitted(fixed_s: float, per_row_s: float, rows: list[int]) -> StepCost:
    cost = StepCost()
    for r in rows:
        cost.observe(r, fixed_s + per_row_s * r)
    return cost


def test_the_fit_finds_the_fixed_cost_in_rows() -> None:
    cost = _fitted(0.012, 0.0035, [4, 4, 52, 4, 13, 4, 28, 1, 49])
    fixed_rows = cost.fixed_rows()
    assert fixed_rows is not None and abs(fixed_rows - 0.012 / 0.0035) < 1e-6


def test_recent_decodes_weigh_most() -> None:
    """A machine that got busier (or a model swapped for a larger one) is followed within ~50 decodes."""
    cost = _fitted(0.012, 0.0035, [1, 49] * 100)
    for r in [1, 49] * 100:
        cost.observe(r, 0.050 + 0.0010 * r)
    fixed_rows = cost.fixed_rows()
    assert fixed_rows is not None and 45 < fixed_rows < 55


def test_no_estimate_until_the_rows_have_varied_or_when_rows_look_free() -> None:
    assert StepCost().fixed_rows() is None
    assert _fitted(0.012, 0.0035, [4] * 50).fixed_rows() is None  # one row count: no slope to see
    assert _fitted(0.020, 0.0, [1, 49, 10] * 10).fixed_rows() is None  # rows cost nothing: no budget


def test_while_a_slot_has_no_draft_the_others_share_a_quarter_of_a_plain_step() -> None:
    fixed_rows = 12 / 3.5  # Gemma 3 270M on two CPU cores
    drafts = [list(range(48)), [], [], []]
    budget = int(OTHERS_SLOWDOWN * (fixed_rows + 4))
    assert share_drafts(drafts, fixed_rows) == [list(range(budget)), [], [], []]
    two = share_drafts([list(range(48)), [], list(range(48)), [1]], 40.0)  # rows cheap: 11 rows to share
    assert [len(d) for d in two] == [4, 0, 4, 1]


def test_drafts_stand_when_every_slot_drafts_or_the_cost_is_unknown() -> None:
    drafts = [list(range(48)), [7, 8]]
    assert share_drafts(drafts, 3.4) == drafts
    assert share_drafts([list(range(48)), []], None) == [list(range(48)), []]
    assert share_drafts([[], []], 3.4) == [[], []]


@given(
    st.lists(st.lists(st.integers(0, 9), max_size=48), min_size=1, max_size=8),
    st.floats(0.0, 200.0),
)
def test_a_cut_draft_is_a_prefix_and_the_budget_holds(drafts: list[list[int]], fixed_rows: float) -> None:
    cut = share_drafts(drafts, fixed_rows)
    assert all(c == d[: len(c)] for c, d in zip(cut, drafts, strict=True))
    if any(not d for d in drafts):
        assert sum(map(len, cut)) <= max(int(OTHERS_SLOWDOWN * (fixed_rows + len(drafts))), 0)


def test_the_speculator_cuts_with_its_own_fit_and_only_when_adaptive() -> None:
    spec = Speculator([Fixed(list(range(20)))], n_seq=2)
    for r in [1, 2] * 5:
        spec.observe(r, 0.012 + 0.0035 * r)  # too little spread yet: nothing is cut
    assert spec.share([list(range(20)), []]) == [list(range(20)), []]
    for r in [1, 49, 2, 30] * 5:
        spec.observe(r, 0.012 + 0.0035 * r)
    assert spec.share([list(range(20)), []]) == [list(range(int(OTHERS_SLOWDOWN * (12 / 3.5 + 2)))), []]
    fixed = Speculator([Fixed(list(range(20)))], n_seq=2, adaptive=False)
    for r in [1, 49, 2, 30] * 5:
        fixed.observe(r, 0.012 + 0.0035 * r)
    assert fixed.share([list(range(20)), []]) == [list(range(20)), []]
