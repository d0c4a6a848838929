"""Synthetic acceptance, llama-server's benchmarking aid (``--spec-synth-len``, ``--spec-synth-rates``).

The verification accepts drafted tokens at random, with fixed per-position rates, instead of by
agreement with the target: the step's cost is then measured at a chosen acceptance, whatever the
text (the generated text is not valid). As in llama.cpp (``common/speculative.cpp``,
``tools/server/server-context.cpp`` at the vendored commit):

* ``--spec-synth-rates P0,P1,...``: the unconditional probabilities that the drafted token at
  position 0, 1, ... stands; one per token of the drafters' ``n_max``, in [0, 1], non-increasing.
* ``--spec-synth-len L``: a mean accepted length ``L`` per step, the step's own token included; the
  rates are ``p, p², ...`` with ``p`` found by bisection, ``L`` from 1 to ``n_max + 1``.
* A row's draw compares a uniform double with the conditional rate ``P(i) / P(i - 1)``; a drafted
  end-of-generation token never stands (it would end the reply early).
* Each slot's generator is a Mersenne Twister seeded with the request's seed (a random one for
  llama.cpp's default seed), read as libstdc++'s ``uniform_real_distribution<double>`` reads
  ``std::mt19937``: the same seed draws the same decisions as llama-server.

The options' text is read in :mod:`service.core.launch_speculative`; they are checked against the
drafters' ``n_max`` here, at load, where llama-server checks them at start.

Pure: stdlib only.
"""

from __future__ import annotations

import math
import random
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field

LLAMA_DEFAULT_SEED = 0xFFFFFFFF  # llama.cpp's "pick a random seed"
_MT_N = 624


class SynthError(ValueError):
    """llama.cpp's refusal of the synthetic acceptance options, in its words."""


def resolve_rates(length: float | None, rates: Sequence[float], n_max: int) -> list[float]:
    """The unconditional rates per drafted position (``common_speculative_synth_rates_resolve``);
    none without either option."""
    if length is None and not rates:
        return []
    if length is not None and rates:
        raise SynthError("synthetic acceptance length and rates are mutually exclusive")
    if n_max <= 0:
        raise SynthError("synthetic acceptance requires at least one speculative token")
    if rates:
        if len(rates) != n_max:
            raise SynthError(f"synthetic acceptance rates must contain {n_max} values, got {len(rates)}")
        for i, rate in enumerate(rates):
            if not math.isfinite(rate) or not 0.0 <= rate <= 1.0:
                raise SynthError("synthetic acceptance rates must be finite and within [0, 1]")
            if i and rate > rates[i - 1]:
                raise SynthError("synthetic acceptance rates must be monotonically non-increasing")
        return list(rates)
    assert length is not None
    if not math.isfinite(length) or not 1.0 <= length <= n_max + 1:
        raise SynthError(f"synthetic acceptance length must be finite and within [1, {n_max + 1}]")
    p = _geometric_rate(length - 1.0, n_max)
    out, rate = [], p
    for _ in range(n_max):  # llama.cpp's products, not powers: the same doubles
        out.append(rate)
        rate *= p
    return out


def _geometric_rate(extra: float, n_max: int) -> float:
    """``p`` with ``p + p² + ... + p^n_max == extra`` (llama.cpp's 32 bisection steps, its float order)."""
    if extra >= n_max:
        return 1.0
    if extra <= 0.0:
        return 0.0
    low, high = 0.0, 1.0
    for _ in range(32):
        mid = 0.5 * (low + high)
        total, term = 0.0, mid
        for _ in range(n_max):
            total += term
            term *= mid
        low, high = (mid, high) if total < extra else (low, mid)
    return 0.5 * (low + high)


def conditional(rates: Sequence[float]) -> list[float]:
    """Each position's chance to stand given the one before stood (``P(i) / P(i - 1)``; 0 after a 0)."""
    out, before = [], 1.0
    for rate in rates:
        out.append(rate / before if before > 0.0 else 0.0)
        before = rate
    return out


class Mt19937Uniform:
    """``std::uniform_real_distribution<double>(0, 1)`` over ``std::mt19937(seed)``, as libstdc++
    computes it: two 32-bit outputs ``a``, ``b`` give ``(a + b·2³²) / 2⁶⁴`` (``generate_canonical``).
    Python's generator is the same Mersenne Twister; only its seeding differs, so the state is set
    from ``init_genrand``."""

    def __init__(self, seed: int) -> None:
        state = [seed & 0xFFFFFFFF]
        for i in range(1, _MT_N):
            prev = state[-1]
            state.append((1812433253 * (prev ^ (prev >> 30)) + i) & 0xFFFFFFFF)
        self._rng = random.Random()
        self._rng.setstate((3, (*state, _MT_N), None))

    def next_u32(self) -> int:
        return self._rng.getrandbits(32)

    def uniform(self) -> float:
        low = float(self.next_u32())
        value = (low + float(self.next_u32()) * 4294967296.0) / 18446744073709551616.0
        return value if value < 1.0 else math.nextafter(1.0, 0.0)


@dataclass
class SynthAcceptance:
    """The worker's synthetic verification: the conditional rates and each sequence's generator."""

    rates: list[float]
    probs: list[float] = field(init=False)
    _rngs: dict[int, Mt19937Uniform] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.probs = conditional(self.rates)

    @property
    def mean_length(self) -> float:
        """The mean tokens a step keeps, its own included (llama.cpp's log line)."""
        return 1.0 + sum(self.rates)

    def begin(self, seq: int, seed: int) -> None:
        """A request starts in ``seq``: its generator is seeded (llama.cpp's default seed: a random one)."""
        seed &= 0xFFFFFFFF
        self._rngs[seq] = Mt19937Uniform(secrets.randbits(32) if seed == LLAMA_DEFAULT_SEED else seed)

    def stands(self, seq: int, position: int) -> bool:
        """Whether the drafted token at ``position`` (0: the first) stands: one draw, as llama.cpp's."""
        rng = self._rngs.get(seq)
        if rng is None:
            rng = self._rngs[seq] = Mt19937Uniform(secrets.randbits(32))
        return position < len(self.probs) and rng.uniform() < self.probs[position]
