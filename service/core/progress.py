"""Progress throttling, transfer-rate and ETA arithmetic for downloads.

Pure: every function takes the current time as an argument (monotonic seconds
from the caller), so the worker, the service and tests share one definition and
tests need no clock. Why throttle at all: every progress event is a row in the
event log and a frame on every SSE stream; a 1 GB download at full speed would
otherwise write thousands of rows per second.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

DEFAULT_MIN_INTERVAL = 0.5
DEFAULT_MIN_FRACTION = 0.005
DEFAULT_HALF_LIFE = 3.0


def should_emit(
    last_time: float | None,
    last_bytes: int | None,
    now: float,
    bytes_done: int,
    total: int,
    min_interval: float = DEFAULT_MIN_INTERVAL,
    min_fraction: float = DEFAULT_MIN_FRACTION,
) -> bool:
    """Whether a progress event should be emitted now.

    True for the first event (``last_time is None``). Afterwards only when
    BOTH at least ``min_interval`` seconds passed since the last emitted event
    AND at least ``min_fraction`` of ``total`` (and at least one byte) was
    added since then. The final 100% event is not guaranteed by this function:
    the caller forces it when the transfer completes, so a fast tail (the last
    0.4% arriving 10 ms after the previous event) still reaches 100%.
    """
    if last_time is None or last_bytes is None:
        return True
    if now - last_time < min_interval:
        return False
    if total <= 0:
        return False
    step = max(1.0, min_fraction * total)
    return bytes_done - last_bytes >= step


@dataclass(frozen=True, slots=True)
class RateState:
    """EWMA of a transfer rate. ``rate`` is None until two samples exist.

    ``last_bytes`` must count bytes moved in *this* session (not bytes already
    on disk when a download resumed), otherwise the resumed prefix would show
    up as an absurd burst of speed.
    """

    rate: float | None = None
    last_time: float | None = None
    last_bytes: int = 0


def update_rate(state: RateState, now: float, bytes_moved: int, half_life: float = DEFAULT_HALF_LIFE) -> RateState:
    """Fold one sample into the EWMA and return the new state.

    The weight of the new sample depends on the elapsed time
    (``alpha = 1 - 2**(-dt/half_life)``), so the estimate is independent of
    how often it is sampled: ten samples 0.1 s apart weigh the same as one
    sample 1 s later. Samples with ``dt <= 0`` are ignored (same timestamp
    twice, or a clock that went backwards).
    """
    if state.last_time is None:
        return RateState(rate=None, last_time=now, last_bytes=bytes_moved)
    dt = now - state.last_time
    if dt <= 0:
        return state
    instant = max(0, bytes_moved - state.last_bytes) / dt
    if state.rate is None:
        rate = instant
    else:
        alpha = 1.0 - math.pow(2.0, -dt / half_life) if half_life > 0 else 1.0
        rate = state.rate + alpha * (instant - state.rate)
    return RateState(rate=rate, last_time=now, last_bytes=bytes_moved)


def eta_seconds(bytes_done: int, total: int, rate: float | None) -> float | None:
    """Seconds until ``total`` at ``rate`` bytes/s; 0 when done; None when unknown (no or zero rate)."""
    remaining = total - bytes_done
    if remaining <= 0:
        return 0.0
    if rate is None or rate <= 0 or math.isnan(rate):
        return None
    return remaining / rate
