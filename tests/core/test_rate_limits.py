"""The rate limits' decision (service.core.rate_limits): admit, or 429 naming the limit and when to retry."""

from __future__ import annotations

from service.core.keys import KeyScope
from service.core.rate_limits import Use, decide_admission, in_window, limited

NOW = 1_000_000.0


def test_no_scope_or_no_limit_is_never_refused() -> None:
    """A full key, an anonymous caller and a named key without rpm/tpm pass whatever they used."""
    lots = [Use(NOW - 1, 1000, 10**9)]
    assert decide_admission(None, lots, NOW) is None
    assert decide_admission(KeyScope(), lots, NOW) is None
    assert not limited(KeyScope()) and limited(KeyScope(rpm=1)) and limited(KeyScope(tpm=1))


def test_rpm_counts_this_request_too() -> None:
    """rpm 3 admits a third request in the window and refuses the fourth."""
    scope = KeyScope(rpm=3)
    two = [Use(NOW - 30, 1, 0), Use(NOW - 10, 1, 0)]
    assert decide_admission(scope, two, NOW) is None
    refusal = decide_admission(scope, [*two, Use(NOW - 5, 1, 0)], NOW)
    assert refusal is not None
    assert (refusal.status, refusal.code, refusal.rule) == (429, "rate_limited", "rpm: 3")
    assert "3 requests per minute" in refusal.message
    assert refusal.retry_after == 30  # the oldest leaves the window at NOW + 30


def test_old_uses_leave_the_window() -> None:
    """Uses 60 s old or older no longer count."""
    scope = KeyScope(rpm=1)
    assert decide_admission(scope, [Use(NOW - 60, 1, 0), Use(NOW - 61, 1, 0)], NOW) is None
    assert decide_admission(scope, [Use(NOW - 59.5, 1, 0)], NOW) is not None


def test_retry_after_frees_enough_requests() -> None:
    """Over by two (another node's requests arrived meanwhile): wait until two have left."""
    scope = KeyScope(rpm=2)
    uses = [Use(NOW - 50, 1, 0), Use(NOW - 40, 1, 0), Use(NOW - 20, 1, 0)]
    refusal = decide_admission(scope, uses, NOW)
    assert refusal is not None and refusal.retry_after == 20  # the second oldest leaves at NOW + 20


def test_tpm_refuses_once_the_tokens_used_reach_it() -> None:
    """tpm 100: 99 tokens used admit one more request, 100 refuse; tokens count with requests or alone."""
    scope = KeyScope(tpm=100)
    assert decide_admission(scope, [Use(NOW - 5, 1, 60), Use(NOW - 4, 0, 39)], NOW) is None
    refusal = decide_admission(scope, [Use(NOW - 45, 0, 60), Use(NOW - 4, 0, 40)], NOW)
    assert refusal is not None and refusal.rule == "tpm: 100" and "100 tokens per minute" in refusal.message
    assert refusal.retry_after == 15  # once the 60 leave, 40 remain


def test_retry_after_is_at_least_one_second_and_whole() -> None:
    """A use about to leave still gives Retry-After: 1, never 0."""
    refusal = decide_admission(KeyScope(rpm=1), [Use(NOW - 59.99, 1, 0)], NOW)
    assert refusal is not None and refusal.retry_after == 1


def test_a_shorter_window_says_so() -> None:
    """With MODELROUTER_RATE_WINDOW_S set, the window and the message follow it."""
    refusal = decide_admission(KeyScope(rpm=1), [Use(NOW - 2, 1, 0)], NOW, window=5)
    assert refusal is not None and refusal.retry_after == 3 and "per 5 s" in refusal.message
    assert decide_admission(KeyScope(rpm=1), [Use(NOW - 5, 1, 0)], NOW, window=5) is None


def test_in_window_sorts_what_arrived_out_of_order() -> None:
    """Other nodes' uses arrive late: the window is sorted by time."""
    uses = [Use(NOW - 1, 1, 0), Use(NOW - 70, 1, 0), Use(NOW - 30, 0, 5)]
    assert [u.at for u in in_window(uses, NOW)] == [NOW - 30, NOW - 1]
