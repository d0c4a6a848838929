"""Which per-model series ``/metrics`` shows (:mod:`service.core.model_series`): bounded labels."""

from __future__ import annotations

from datetime import UTC, datetime

from service.core import events as ev
from service.core.fold import replay
from service.core.keys import ANONYMOUS, FULL, KeyScope, NamedKey
from service.core.model_series import counted, shown_key, shown_model, status_class
from tests.core.examples import example

_KEY = NamedKey("alice", "0" * 12, "00", "d", KeyScope(), datetime(2026, 1, 1, tzinfo=UTC))


def _recorded(position: int, event: ev.Event, model: str) -> ev.Recorded:
    return ev.Recorded(position, f"e{position}", model, event, {}, datetime(2026, 1, 1, tzinfo=UTC))


def test_status_classes_are_bounded_whatever_a_worker_answers() -> None:
    assert [status_class(code) for code in (200, 299, 404, 429, 500, 503)] == ["2xx", "2xx", "4xx", "4xx", "5xx", "5xx"]
    assert {status_class(code) for code in (0, 42, 600, 999, 10_000)} <= {"1xx", "5xx"}


def test_monitoring_reads_are_no_requests_of_a_model() -> None:
    assert counted("/v1/chat/completions") and counted("/completion") and counted("/v1/messages")
    assert not counted("/metrics") and not counted("/slots") and not counted("/props")


def test_only_live_keys_and_the_two_built_in_callers_have_a_key_label() -> None:
    keys = {"alice": _KEY}
    assert [shown_key(k, keys) for k in ("alice", FULL, ANONYMOUS)] == ["alice", FULL, ANONYMOUS]
    assert shown_key("bob", keys) is None, "revoked (or never known here)"
    assert shown_key(None, keys) is None, "a log from before issue 34 names no caller"


def test_a_removed_model_is_no_longer_shown() -> None:
    discovered = _recorded(1, example(ev.ModelDiscovered, path="/m/a.gguf"), "a")
    state = replay([discovered])
    assert shown_model(state, "a") and not shown_model(state, "b")
    removed = replay([discovered, _recorded(2, ev.ModelRemoved(files=()), "a")])
    assert "a" in removed.models and not shown_model(removed, "a")
