"""speculative/_step_cost.py: what a draft costs the slots beside it, fitted from the decodes."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tests.workers.inference.speculative.test_drafting import Fixed
from workers.inference.speculative import Speculator, passes
from workers.inference.speculative._step_cost import StepCost, share_drafts, shortest_draft

FIXED, PER_ROW = 0.012, 0.0035  # Gemma 3 270M on two CPU cores: a pass, a row


def test_one_kv_pool_takes_any_mix_of_rows_in_one_micro_batch() -> None:
    assert passes([(0, 1), (1, 1), (2, 49), (3, 1)], 512, per_stream=False) == 1
    assert passes([(0, 600)], 512, per_stream=False) == 2


def test_a_stream_per_slot_takes_equal_rows_from_consecutive_sequences() -> None:
    assert passes([(0, 1), (1, 1), (2, 1), (3, 1)], 512, per_stream=True) == 1
    assert passes([(0, 49)], 512, per_stream=True) == 1
    assert passes([(0, 1), (1, 1), (2, 1), (3, 9)], 512, per_stream=True) == 2  # the draft's own pass
    assert passes([(0, 9), (1, 1), (2, 1), (3, 9)], 512, per_stream=True) == 3  # 0-3 x1, then 0 x8, then 3 x8
    assert passes([(0, 1), (2, 1)], 512, per_stream=True) == 2  # a gap: not consecutive (engine._compaction)
    assert passes([(0, 5), (1, 5)], 512, per_stream=True) == 1


def _fitted(rows_passes: list[tuple[int, int]]) -> StepCost:
    cost = StepCost()
    for rows, n in rows_passes:
        cost.observe(n, rows, FIXED * n + PER_ROW * rows)
    return cost


def test_the_fit_finds_a_pass_s_cost_in_rows() -> None:
    one_stream = _fitted([(1, 1), (49, 1), (13, 1), (1, 1), (30, 1)])
    four_streams = _fitted([(4, 1), (4, 1), (52, 2), (4, 1), (13, 2), (4, 1)])
    for cost in (one_stream, four_streams):
        fixed_rows = cost.fixed_rows()
        assert fixed_rows is not None and abs(fixed_rows - FIXED / PER_ROW) < 1e-6


def test_recent_decodes_weigh_most() -> None:
    """A machine that got busier (or slower rows) is followed within ~50 decodes."""
    cost = _fitted([(1, 1), (49, 1)] * 100)
    for rows in [1, 49] * 100:
        cost.observe(1, rows, 0.050 + 0.001 * rows)
    fixed_rows = cost.fixed_rows()
    assert fixed_rows is not None and 45 < fixed_rows < 55


def test_no_estimate_until_rows_per_pass_have_varied_or_when_rows_look_free() -> None:
    assert StepCost().fixed_rows() is None
    assert _fitted([(4, 1)] * 50).fixed_rows() is None  # one shape of step: no way to tell a pass from a row
    free = StepCost()
    for rows in [1, 49, 10] * 10:
        free.observe(1, rows, 0.020)
    assert free.fixed_rows() is None


def test_the_shortest_draft_worth_its_pass_grows_with_the_pass_s_cost() -> None:
    cpu, gpu = shortest_draft(FIXED / PER_ROW, 4), shortest_draft(100.0, 4)
    assert cpu == 15 and gpu == 32
    k = cpu  # the others lose fixed / ((k + 1)(fixed + 4 rows)) of their time: within 3 %
    assert FIXED / ((k + 1) * (FIXED + 4 * PER_ROW)) <= 0.03 < FIXED / (k * (FIXED + 4 * PER_ROW))


def test_beside_a_slot_without_a_draft_short_drafts_are_dropped_with_a_stream_per_slot() -> None:
    c = FIXED / PER_ROW
    drafts = [list(range(48)), [], [1, 2, 3], list(range(15))]
    assert share_drafts(drafts, c, per_stream=True) == [list(range(48)), [], [], list(range(15))]
    assert share_drafts(drafts, c, per_stream=False) == drafts  # one pool: a row costs the others one row
    assert share_drafts(drafts, None, per_stream=True) == drafts  # not measured yet
    every = [list(range(48)), [1, 2]]
    assert share_drafts(every, c, per_stream=True) == every  # every slot gains from the longer step


@given(st.lists(st.lists(st.integers(0, 9), max_size=48), min_size=1, max_size=8), st.floats(0.0, 200.0))
def test_a_draft_stands_whole_or_not_at_all(drafts: list[list[int]], fixed_rows: float) -> None:
    shared = share_drafts(drafts, fixed_rows, per_stream=True)
    assert all(s in ([], d) for s, d in zip(shared, drafts, strict=True))


def test_the_speculator_drops_with_its_own_fit_and_only_when_adaptive() -> None:
    short = [[1, 2, 3], []]
    spec = Speculator([Fixed(list(range(20)))], n_seq=2)
    assert spec.share(short, per_stream=True) == short  # no fit yet
    for rows, n in [(2, 1), (5, 2), (2, 1), (20, 2)] * 5:
        spec.observe(n, rows, FIXED * n + PER_ROW * rows)
    assert spec.share(short, per_stream=True) == [[], []]
    fixed = Speculator([Fixed(list(range(20)))], n_seq=2, adaptive=False)
    for rows, n in [(2, 1), (5, 2), (2, 1), (20, 2)] * 5:
        fixed.observe(n, rows, FIXED * n + PER_ROW * rows)
    assert fixed.share(short, per_stream=True) == short
