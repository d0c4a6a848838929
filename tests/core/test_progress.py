"""Progress throttle, rate/ETA arithmetic and retry backoff (pure functions)."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from service.core.backoff import retry_delay
from service.core.progress import RateState, eta_seconds, should_emit, update_rate

# A transfer as a list of (seconds since previous sample, bytes since previous sample).
samples = st.lists(st.tuples(st.floats(0.0, 0.3), st.integers(0, 5_000_000)), min_size=1, max_size=300)


def _emissions(steps: list[tuple[float, int]], total: int) -> list[tuple[float, int]]:
    now, done, last_t, last_b, out = 0.0, 0, None, None, []
    for dt, db in steps:
        now += dt
        done = min(total, done + db)
        if should_emit(last_t, last_b, now, done, total):
            out.append((now, done))
            last_t, last_b = now, done
    return out


@given(samples, st.integers(1, 10**10))
def test_emissions_are_spaced_in_time_and_bytes(steps: list[tuple[float, int]], total: int) -> None:
    out = _emissions(steps, total)
    assert out, "the first sample is always emitted"
    for (t0, b0), (t1, b1) in itertools.pairwise(out):
        assert t1 - t0 >= 0.5
        assert b1 - b0 >= max(1.0, 0.005 * total)


@given(samples)
def test_at_most_two_per_second(steps: list[tuple[float, int]]) -> None:
    out = _emissions(steps, 10**12)
    duration = sum(dt for dt, _ in steps)
    assert len(out) <= math.floor(duration / 0.5) + 1


def test_should_emit_cases() -> None:
    assert should_emit(None, None, 0.0, 0, 100)
    assert not should_emit(0.0, 0, 0.49, 50, 100)  # too soon
    assert not should_emit(0.0, 0, 5.0, 0, 100_000)  # nothing new
    assert not should_emit(0.0, 1000, 5.0, 1499, 100_000)  # < 0.5 %
    assert should_emit(0.0, 1000, 0.5, 1500, 100_000)
    assert not should_emit(0.0, 0, 9.0, 0, 0)  # unknown total: only the first and the forced final
    assert should_emit(0.0, 0, 1.0, 1, 10, min_interval=1.0, min_fraction=0.0)


def test_rate_converges_to_a_constant_speed() -> None:
    state = update_rate(RateState(), 0.0, 0)
    assert state.rate is None
    for i in range(1, 60):
        state = update_rate(state, i * 0.5, i * 5_000_000)  # 10 MB/s
    assert state.rate == pytest.approx(10_000_000, rel=1e-6)


def test_rate_follows_a_change_with_the_half_life() -> None:
    state = RateState(rate=1000.0, last_time=0.0, last_bytes=0)
    # 3 s (one half-life) at 3000 B/s moves the estimate half way from 1000 to 3000
    state = update_rate(state, 3.0, 9000, half_life=3.0)
    assert state.rate == pytest.approx(2000.0)
    assert update_rate(state, 3.0, 99999) == state  # dt == 0 ignored
    assert update_rate(state, 2.0, 99999) == state  # clock went backwards


@given(st.lists(st.floats(0.01, 2.0), min_size=2, max_size=50), st.floats(1.0, 1e9))
def test_rate_is_sampling_independent_at_constant_speed(gaps: list[float], speed: float) -> None:
    state, now = update_rate(RateState(), 0.0, 0), 0.0
    for g in gaps:
        now += g
        state = update_rate(state, now, int(now * speed))
    assert state.rate == pytest.approx(speed, rel=1e-3, abs=2.0 / min(gaps))


def test_eta() -> None:
    assert eta_seconds(50, 100, 10.0) == 5.0
    assert eta_seconds(100, 100, None) == 0.0
    assert eta_seconds(10, 100, None) is None
    assert eta_seconds(10, 100, 0.0) is None


def test_retry_delay_is_capped_exponential() -> None:
    assert [retry_delay(a, base=1.0, cap=30.0) for a in range(1, 8)] == [1, 2, 4, 8, 16, 30, 30]
    assert retry_delay(10_000, base=1.0, cap=5.0) == 5.0  # no overflow


@given(st.integers(1, 200), st.floats(0.0, 10.0), st.floats(0.0, 100.0), st.floats(0.0, 1.0))
def test_retry_delay_bounds(attempt: int, base: float, cap: float, jitter: float) -> None:
    plain = retry_delay(attempt, base, cap)
    jittered = retry_delay(attempt, base, cap, jitter)
    assert plain <= cap
    assert plain / 2 <= jittered <= plain
    assert retry_delay(attempt, base, cap, jitter) == jittered  # deterministic
    assert retry_delay(attempt + 1, base, cap) >= plain  # never shrinks


@pytest.mark.parametrize("args", [(0, 1.0, 1.0, 0.0), (1, -1.0, 1.0, 0.0), (1, 1.0, 1.0, 1.5)])
def test_retry_delay_rejects_nonsense(args: tuple[int, float, float, float]) -> None:
    with pytest.raises(ValueError):
        retry_delay(*args)
