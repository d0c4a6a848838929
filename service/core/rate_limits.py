"""A named key's rate limits (issue 34): admit a request, or refuse it with 429 and ``Retry-After``.

A key's use is a list of :class:`Use` entries over a sliding window (60 s by default): a request
counts when it is admitted, its tokens (prompt + completion, as llama-server counts them) when it
completes, since only then are they known. So ``rpm`` counts this request too, while ``tpm``
refuses once the tokens already used reach the limit (this request's own are not known yet).

Times are seconds since the epoch: the log's ``recorded_at`` and every node's clock share them, so
a restarted node or another node rebuilds the same window. Pure: stdlib only.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from service.core.keys import KeyScope, Refusal

WINDOW_S = 60.0
"""The window of "per minute" (``MODELROUTER_RATE_WINDOW_S`` changes it, for tests and demos)."""


@dataclass(frozen=True, slots=True)
class Use:
    """What one entry of a key's window adds: at ``at`` (epoch seconds), ``requests`` and ``tokens``."""

    at: float
    requests: int
    tokens: int


def limited(scope: KeyScope | None) -> bool:
    """Whether a caller's scope has any rate limit (a full key or an anonymous caller has none)."""
    return scope is not None and (scope.rpm is not None or scope.tpm is not None)


def in_window(uses: Iterable[Use], now: float, window: float = WINDOW_S) -> list[Use]:
    """The entries still counted at ``now``, oldest first."""
    start = now - window
    return sorted((u for u in uses if u.at > start), key=lambda u: u.at)


def _wait(counted: Iterable[Use], excess: int, amount: str, now: float, window: float) -> int:
    """Whole seconds until the oldest entries carrying ``excess`` of ``amount`` leave the window."""
    freed = 0
    for use in counted:
        freed += getattr(use, amount)
        if freed >= excess:
            return max(1, math.ceil(use.at + window - now))
    return max(1, math.ceil(window))  # unreachable for a consistent excess; a full window is safe


def decide_counted(
    scope: KeyScope | None, counted: Iterable[Use], requests: int, tokens: int, now: float, window: float = WINDOW_S
) -> Refusal | None:
    """:func:`decide_admission` for a window kept current by the caller: ``counted`` oldest first and
    only what is in the window, ``requests`` and ``tokens`` its sums. Walks ``counted`` only to
    refuse (for ``Retry-After``), so an admission costs the same however busy the key is."""
    if scope is None or not limited(scope):
        return None
    per = "minute" if window == WINDOW_S else f"{window:g} s"
    if scope.rpm is not None and requests + 1 > scope.rpm:  # this one too
        wait = _wait(counted, requests + 1 - scope.rpm, "requests", now, window)
        rule = f"rpm: {scope.rpm}"
        message = f"rate limit reached: this key may make {scope.rpm} requests per {per} ({rule})"
        return Refusal(429, "rate_limited", rule, f"{message}; retry after {wait} s", retry_after=wait)
    if scope.tpm is not None and tokens >= scope.tpm:
        wait = _wait(counted, tokens - scope.tpm + 1, "tokens", now, window)
        rule = f"tpm: {scope.tpm}"
        message = f"rate limit reached: this key may use {scope.tpm} tokens per {per} ({rule})"
        return Refusal(429, "rate_limited", rule, f"{message}; retry after {wait} s", retry_after=wait)
    return None


def decide_admission(
    scope: KeyScope | None, uses: Iterable[Use], now: float, window: float = WINDOW_S
) -> Refusal | None:
    """None if a request of a caller with ``scope`` may start at ``now`` given its window's
    ``uses`` (any order, old ones included); else the 429 naming the limit (``rpm: N`` /
    ``tpm: N``) with ``retry_after``."""
    counted = in_window(uses, now, window)
    requests, tokens = sum(u.requests for u in counted), sum(u.tokens for u in counted)
    return decide_counted(scope, counted, requests, tokens, now, window)
