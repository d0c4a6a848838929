"""speculative/_step_cost.py: a slot's draft is not paid for by the slots beside it, and a step's rows
fit the CPU kernels' tiles."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tests.workers.inference.speculative.test_drafting import Fixed
from workers.inference.speculative import Speculator
from workers.inference.speculative._step_cost import CPU_TILE, fit_tile, share_drafts, tile_pad


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


def test_rows_one_past_a_cpu_tile_drop_the_longest_drafts_last_token() -> None:
    """ggml's repacked CPU kernels take rows four at a time: 49 rows cost more than 48 plus a plain step."""
    assert fit_tile([list(range(48))], CPU_TILE) == [list(range(47))]  # 49 rows -> 48
    assert fit_tile([list(range(4)), list(range(7))], CPU_TILE) == [list(range(4)), list(range(6))]  # 13 -> 12
    assert fit_tile([list(range(46))], CPU_TILE) == [list(range(46))]  # 47 rows: dropping 3 tokens loses more
    assert fit_tile([list(range(47))], CPU_TILE) == [list(range(47))]  # 48 rows: a tile already
    assert fit_tile([[], [], [], [1]], CPU_TILE) == [[], [], [], []]  # 5 rows cost more than 4 and a step
    assert fit_tile([[], []], CPU_TILE) == [[], []]
    assert fit_tile([[1, 2, 3, 4]], 1) == [[1, 2, 3, 4]]  # a GPU: no tiles


@given(st.lists(st.lists(st.integers(0, 9), max_size=48), min_size=1, max_size=8))
def test_a_fitted_step_is_never_one_row_past_a_tile_and_loses_at_most_one_token(drafts: list[list[int]]) -> None:
    fitted = fit_tile(drafts, CPU_TILE)
    assert all(f == d[: len(f)] for f, d in zip(fitted, drafts, strict=True)), "a prefix of each draft"
    before, after = sum(1 + len(d) for d in drafts), sum(1 + len(f) for f in fitted)
    if before > CPU_TILE and before % CPU_TILE == 1 and any(drafts):
        assert after == before - 1, "one token less: a whole tile"
    else:
        assert fitted == drafts


def test_the_tile_applies_where_the_rows_share_one_micro_batch() -> None:
    """One KV pool, or a single generating slot; with a stream per slot and several, split_equal splits
    the rows by sequence, and equal drafts stay equal (adaptive drafting only)."""
    spec = Speculator([Fixed(list(range(48)))], n_seq=4)
    assert spec.share([list(range(48))], per_stream=True, tile=CPU_TILE) == [list(range(47))]
    two = [list(range(48)), list(range(48))]
    assert spec.share(two, per_stream=True, tile=CPU_TILE) == two
    pooled = spec.share([list(range(4)), list(range(7))], per_stream=False, tile=CPU_TILE)
    assert pooled == [list(range(4)), list(range(6))]
    plain_rule = Speculator([Fixed(list(range(48)))], n_seq=4, adaptive=False)
    assert plain_rule.share([list(range(48))], per_stream=True, tile=CPU_TILE) == [list(range(48))]


def test_rows_two_or_three_past_a_cpu_tile_are_padded_to_a_whole_tile() -> None:
    assert [tile_pad(rows, CPU_TILE) for rows in (6, 7, 30, 31, 47)] == [2, 1, 2, 1, 1]
    assert [tile_pad(rows, CPU_TILE) for rows in (8, 48, 5, 49)] == [0, 0, 0, 0]  # a tile; one past: fit_tile
    assert [tile_pad(rows, CPU_TILE) for rows in (1, 2, 3, 4)] == [0, 0, 0, 0]  # one by one, as cheap
    assert tile_pad(7, 1) == 0  # a GPU: no tiles


@given(st.integers(1, 600), st.sampled_from([1, 2, 4, 8]))
def test_a_pad_completes_the_last_tile_or_is_not_added(rows: int, tile: int) -> None:
    pad = tile_pad(rows, tile)
    assert 0 <= pad < max(tile, 1)
    if pad:
        assert rows > tile and (rows + pad) % tile == 0 and rows % tile >= 2
    else:
        assert rows <= tile or tile == 1 or rows % tile in (0, 1)
