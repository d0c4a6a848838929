"""Retry delays for transient failures (download worker retries, restarts).

Pure and deterministic: the caller supplies the jitter (a number in [0, 1], e.g.
``random.random()``), so tests can pin it and the same inputs always give the
same delay. No clock, no randomness inside.
"""

from __future__ import annotations

import math

# 2**62 seconds is far beyond any sensible cap; clamping the exponent keeps the
# arithmetic in float range for absurd attempt numbers instead of overflowing.
_MAX_EXPONENT = 62


def retry_delay(attempt: int, base: float = 0.5, cap: float = 30.0, jitter: float = 0.0) -> float:
    """Seconds to wait before retry number ``attempt`` (1 = first retry).

    Capped exponential backoff with "equal jitter": the un-jittered delay is
    ``d = min(cap, base * 2**(attempt-1))`` and the result lies in ``[d/2, d]``:
    ``jitter=0`` gives exactly ``d``, ``jitter=1`` gives ``d/2``. Half of the
    delay is kept fixed so that jitter never collapses a backoff to ~0 (which
    would hammer a struggling server), while still de-synchronising workers.
    """
    if attempt < 1:
        raise ValueError(f"attempt must be >= 1, got {attempt}")
    if base < 0 or cap < 0 or math.isnan(base) or math.isnan(cap):
        raise ValueError(f"base and cap must be >= 0, got base={base} cap={cap}")
    if not 0.0 <= jitter <= 1.0:
        raise ValueError(f"jitter must be in [0, 1], got {jitter}")
    exponent = min(attempt - 1, _MAX_EXPONENT)
    delay = min(cap, base * float(2**exponent))
    return delay * (1.0 - 0.5 * jitter)
