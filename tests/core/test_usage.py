"""``usage``: request_completed events in, the sums per key, model, day or hour out; who sees what."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from service.core import events as ev
from service.core.keys import ADMIN, ANONYMOUS_PRINCIPAL, FULL_PRINCIPAL, INFERENCE, KeyScope, Principal, Refusal
from service.core.usage import (
    UsageRecord,
    parse_moment,
    percentile,
    usage_record,
    usage_report,
    usage_scope,
)
from tests.core.examples import example

T0 = datetime(2026, 3, 1, 23, 30, tzinfo=UTC)


def rec(
    minutes: float, key: str = "alice", model: str = "m", status: int = 200, ms: float = 10.0, p: int = 5, c: int = 2
) -> UsageRecord:  # a table row
    return UsageRecord(T0 + timedelta(minutes=minutes), key, model, status, ms, p, c)


class TestRecords:
    def test_a_request_completed_is_a_record(self) -> None:
        done = example(ev.RequestCompleted, key="bob", prompt_tokens=7, completion_tokens=3, status_code=200)
        got = usage_record(ev.Recorded(1, "e1", "org/m", done, {}, T0))
        assert got is not None
        assert (got.key, got.model, got.prompt_tokens, got.completion_tokens, got.at) == ("bob", "org/m", 7, 3, T0)

    def test_older_events_count_as_anonymous_with_no_tokens(self) -> None:
        """A log from before issue 34 names no key and no tokens: anonymous, 0 tokens, still a request."""
        done = example(ev.RequestCompleted, key=None, prompt_tokens=None, completion_tokens=None)
        got = usage_record(ev.Recorded(1, "e1", "m", done, {}, T0))
        assert got is not None
        assert (got.key, got.prompt_tokens, got.completion_tokens) == ("anonymous", 0, 0)

    def test_other_events_are_not_records(self) -> None:
        assert usage_record(ev.Recorded(1, "e1", "m", example(ev.InstanceRequested), {}, T0)) is None


class TestReport:
    def test_groups_by_key_with_a_total(self) -> None:
        records = [rec(0), rec(1, p=3, c=1), rec(2, key="bob", status=503), rec(3, key="bob", status=404)]
        report = usage_report(records, group_by="key")
        alice, bob = report.rows
        assert (alice.group, alice.requests, alice.prompt_tokens, alice.completion_tokens, alice.errors) == (
            "alice",
            2,
            8,
            3,
            0,
        )
        assert (bob.group, bob.requests, bob.errors) == ("bob", 2, 2)
        total = report.total
        assert (total.requests, total.prompt_tokens, total.completion_tokens, total.errors) == (4, 18, 7, 2)

    def test_filters_by_key_and_model(self) -> None:
        records = [rec(0), rec(1, model="n"), rec(2, key="bob")]
        assert usage_report(records, key="alice").total.requests == 2
        assert usage_report(records, key="alice", model="n").total.requests == 1
        assert usage_report(records, model="m", group_by="model").rows[0].group == "m"

    def test_days_and_hours_are_utc_and_in_time_order(self) -> None:
        """T0 is 23:30 UTC: 40 minutes later is the next day, and the hours follow each other."""
        records = [rec(40), rec(0), rec(10)]
        days = usage_report(records, group_by="day").rows
        assert [(r.group, r.requests) for r in days] == [("2026-03-01", 2), ("2026-03-02", 1)]
        hours = usage_report(records, group_by="hour").rows
        assert [r.group for r in hours] == ["2026-03-01T23:00Z", "2026-03-02T00:00Z"]

    def test_no_group_gives_the_total_only(self) -> None:
        report = usage_report([rec(0)])
        assert report.rows == ()
        assert report.total.requests == 1

    def test_nothing_is_zeros_without_percentiles(self) -> None:
        total = usage_report([], group_by="key").total
        assert (total.requests, total.prompt_tokens, total.p50_ms, total.p95_ms) == (0, 0, None, None)

    def test_durations_p50_and_p95(self) -> None:
        """Twenty requests of 1..20 ms: the median is 10 ms and the 95th percentile 19 ms (nearest rank)."""
        report = usage_report([rec(i, ms=float(i + 1)) for i in range(20)])
        assert (report.total.p50_ms, report.total.p95_ms) == (10.0, 19.0)


@pytest.mark.parametrize(("values", "p", "want"), [([5.0], 95, 5.0), ([1.0, 2.0], 50, 1.0), ([1.0, 2.0], 51, 2.0)])
def test_percentile_is_a_value_that_occurred(values: list[float], p: float, want: float) -> None:
    assert percentile(values, p) == want


class TestWhoSeesWhat:
    inference_only = Principal("alice", KeyScope(endpoints=(INFERENCE,)))
    admin = Principal("ops", KeyScope(endpoints=(INFERENCE, ADMIN)))

    @pytest.mark.parametrize("principal", [FULL_PRINCIPAL, ANONYMOUS_PRINCIPAL, admin], ids=["full", "anon", "admin"])
    def test_full_admin_and_open_mode_see_what_they_ask(self, principal: Principal) -> None:
        assert usage_scope(principal, None) is None
        assert usage_scope(principal, "bob") == "bob"

    def test_a_named_key_sees_its_own(self) -> None:
        assert usage_scope(self.inference_only, None) == "alice"
        assert usage_scope(self.inference_only, "alice") == "alice"

    def test_a_named_key_asking_for_another_is_refused_without_its_data(self) -> None:
        refused = usage_scope(self.inference_only, "bob")
        assert isinstance(refused, Refusal)
        assert (refused.status, refused.code) == (403, "usage_not_allowed")
        assert "bob" not in refused.message + refused.rule

    def test_the_forced_filter_hides_other_keys(self) -> None:
        """Applied to a report, a named key's scope leaves only its own requests."""
        records = [rec(0), rec(1, key="bob"), rec(2, key="bob")]
        key = usage_scope(self.inference_only, None)
        assert isinstance(key, str)
        report = usage_report(records, key=key, group_by="key")
        assert [r.group for r in report.rows] == ["alice"]


class TestMoments:
    now = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)

    @pytest.mark.parametrize(
        ("text", "want"),
        [
            ("24h", datetime(2026, 3, 1, 12, 0, tzinfo=UTC)),
            ("30m", datetime(2026, 3, 2, 11, 30, tzinfo=UTC)),
            ("7d", datetime(2026, 2, 23, 12, 0, tzinfo=UTC)),
            ("2026-03-01", datetime(2026, 3, 1, tzinfo=UTC)),
            ("2026-03-01T10:00:00Z", datetime(2026, 3, 1, 10, tzinfo=UTC)),
            ("2026-03-01T10:00:00 02:00", datetime(2026, 3, 1, 8, tzinfo=UTC)),  # '+' decoded as a space
        ],
    )
    def test_iso_or_relative(self, text: str, want: datetime) -> None:
        assert parse_moment(text, self.now) == want

    @pytest.mark.parametrize("text", ["yesterday", "24", "h", "-3h", "2026-13-01"])
    def test_anything_else_is_none(self, text: str) -> None:
        assert parse_moment(text, self.now) is None
