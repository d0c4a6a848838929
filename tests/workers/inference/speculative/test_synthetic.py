"""Synthetic acceptance's pure parts (llama-server's ``--spec-synth-*``): the options' text, the rates
llama.cpp resolves, and the generator its draws come from.

The expected doubles were printed by a C++ program built with g++ and libstdc++ (the library
llama-server links): ``std::mt19937`` read through ``std::uniform_real_distribution<double>(0, 1)``,
and ``common_speculative_synth_rates_resolve``'s bisection copied from ``common/speculative.cpp``.
"""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from service.core.launch_speculative import parse_synth_len, parse_synth_rates
from workers.inference.speculative._synthetic import (
    LLAMA_DEFAULT_SEED,
    Mt19937Uniform,
    SynthAcceptance,
    SynthError,
    conditional,
    resolve_rates,
)


def test_the_generator_is_the_standard_s_mersenne_twister() -> None:
    """The C++ standard's check of ``std::mt19937``: default seed 5489, the 10000th output."""
    rng = Mt19937Uniform(5489)
    for _ in range(9999):
        rng.next_u32()
    assert rng.next_u32() == 4123659995


@pytest.mark.parametrize(
    ("seed", "expected"),
    [
        (0, [0.59284461651668263, 0.84426574425659828, 0.85794561998982988, 0.84725173738433124]),
        (42, [0.79654298428784598, 0.18343478789336848, 0.77969099761266125, 0.59685016158005655]),
        (4294967294, [0.10184899170898529, 0.94789751258733013, 0.82893340139475558, 0.37232930669741121]),
    ],
)
def test_uniform_doubles_are_libstdcxx_s(seed: int, expected: list[float]) -> None:
    rng = Mt19937Uniform(seed)
    assert [rng.uniform() for _ in expected] == expected


def test_a_mean_length_resolves_to_llama_cpp_s_rates() -> None:
    assert resolve_rates(2.5, [], 3) == [0.69141397986095399, 0.47805329154716369, 0.33053272889425339]
    assert resolve_rates(1.7, [], 8)[:3] == [0.41196575446520001, 0.16971578285208147, 0.069917090527309794]
    assert resolve_rates(4.0, [], 3) == [1.0, 1.0, 1.0]  # n_max + 1: every draft stands
    assert resolve_rates(1.0, [], 3) == [0.0, 0.0, 0.0]
    assert resolve_rates(None, [], 3) == []


@given(st.floats(1.0, 9.0), st.integers(8, 16))
def test_the_rates_sum_to_the_mean_length_less_the_step_s_token(length: float, n_max: int) -> None:
    rates = resolve_rates(length, [], n_max)
    assert len(rates) == n_max and math.isclose(1.0 + sum(rates), length, abs_tol=1e-6)
    assert all(a >= b for a, b in itertools.pairwise(rates))


@pytest.mark.parametrize(
    ("length", "rates", "n_max", "words"),
    [
        (2.0, [0.5], 1, "synthetic acceptance length and rates are mutually exclusive"),
        (2.0, [], 0, "synthetic acceptance requires at least one speculative token"),
        (None, [0.5, 0.4], 3, "synthetic acceptance rates must contain 3 values, got 2"),
        (None, [0.5, 1.5], 2, "synthetic acceptance rates must be finite and within [0, 1]"),
        (None, [0.5, math.nan], 2, "synthetic acceptance rates must be finite and within [0, 1]"),
        (None, [0.4, 0.5], 2, "synthetic acceptance rates must be monotonically non-increasing"),
        (0.5, [], 3, "synthetic acceptance length must be finite and within [1, 4]"),
        (math.inf, [], 3, "synthetic acceptance length must be finite and within [1, 4]"),
    ],
)
def test_llama_cpp_s_refusals(length: float | None, rates: list[float], n_max: int, words: str) -> None:
    with pytest.raises(SynthError) as refused:
        resolve_rates(length, rates, n_max)
    assert str(refused.value) == words


def test_a_position_stands_with_its_rate_given_the_one_before() -> None:
    assert conditional([0.8, 0.4, 0.0, 0.0]) == [0.8, 0.5, 0.0, 0.0]


def test_the_options_text_is_read_as_arg_cpp_reads_it() -> None:
    assert parse_synth_len(" 2.5 ") == 2.5
    assert parse_synth_rates("0.9, 0.5,0") == "0.9,0.5,0.0"
    for bad in ("-1", "two", ""):
        with pytest.raises(ValueError, match="--spec-synth-len"):
            parse_synth_len(bad)
    with pytest.raises(ValueError, match="--spec-synth-rates"):
        parse_synth_rates("0.9,,0.5")


def test_a_sequence_s_draws_follow_its_seed() -> None:
    """A seed's decisions are the libstdc++ draws against the conditional rates; each sequence has its own."""
    synth = SynthAcceptance([0.7, 0.5, 0.2])
    synth.begin(0, 42)
    synth.begin(1, 0)
    expected0 = [0.79654298428784598 < 0.7, 0.18343478789336848 < 0.5 / 0.7, 0.77969099761266125 < 0.2 / 0.5]
    assert [synth.stands(0, i) for i in range(3)] == expected0 == [False, True, False]
    assert synth.stands(1, 0) is (0.59284461651668263 < 0.7)


def test_llama_cpp_s_default_seed_draws_from_a_random_seed() -> None:
    """Not from 0xFFFFFFFF itself: 64 draws at rate 0.5 match that seed's by chance once in 2⁶⁴."""
    synth, fixed = SynthAcceptance([0.5]), Mt19937Uniform(LLAMA_DEFAULT_SEED)
    synth.begin(0, LLAMA_DEFAULT_SEED)
    assert [synth.stands(0, 0) for _ in range(64)] != [fixed.uniform() < 0.5 for _ in range(64)]
