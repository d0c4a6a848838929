"""The rate limits' counters (service.api.rate_gate): each request counted once, wherever it was
admitted and recorded, and the window rebuilt from a real SQLite log at start-up."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path

from service.api.rate_gate import RateGate
from service.core import events as ev
from service.core.keys import FULL, KeyScope, Principal
from service.core.state import RouterState
from service.event_store.async_store import AsyncEventStore
from service.event_store.codec import NewEvent
from service.event_store.live_state import LiveState

NOW = 1_000_000.0


def _done(key: str | None, prompt: int | None = None, completion: int | None = None) -> ev.RequestCompleted:
    return ev.RequestCompleted(
        instance_id="i",
        route="/v1/chat/completions",
        status_code=200,
        duration_ms=1.0,
        key=key,
        prompt_tokens=prompt,
        completion_tokens=completion,
    )


def _recorded(event: ev.Event, node: str | None, at: float = NOW) -> ev.Recorded:
    source = {"kind": "router", **({"node": node} if node else {})}
    return ev.Recorded(1, "e", "m", event, source, datetime.fromtimestamp(at, UTC))


def _gate(node: str | None = "a") -> RateGate:
    return RateGate(node, clock=lambda: NOW)


def _admits(gate: RateGate, who: Principal, times: int) -> list[bool]:
    return [gate.admit(who) is None for _ in range(times)]


def test_an_admitted_request_recorded_here_counts_once() -> None:
    """Its request_completed adds its tokens only: rpm 3 admits a third after two recorded ones."""
    gate, who = _gate(), Principal("k", KeyScope(rpm=3))
    assert _admits(gate, who, 2) == [True, True]
    for _ in range(2):
        gate.on_folded(_recorded(_done("k", 3, 2), "a"), RouterState())
    assert _admits(gate, who, 2) == [True, False]


def test_another_nodes_request_counts_whole() -> None:
    """Two requests another node recorded use up rpm 2, their tokens tpm 10."""
    gate = _gate()
    gate.on_folded(_recorded(_done("k", 4, 1), "b"), RouterState())
    gate.on_folded(_recorded(_done("k", 4, 1), "b"), RouterState())
    refusal = gate.admit(Principal("k", KeyScope(rpm=2)))
    assert refusal is not None and refusal.rule == "rpm: 2"
    refusal = gate.admit(Principal("k", KeyScope(tpm=10)))
    assert refusal is not None and refusal.rule == "tpm: 10"
    assert gate.admit(Principal("k", KeyScope(tpm=11))) is None


def test_a_forwarded_request_is_taken_back_for_the_serving_nodes_record() -> None:
    """Admitted here, served and recorded by node b: b's request_completed counts it, not the admission."""
    gate, who = _gate(), Principal("k", KeyScope(rpm=2))
    assert _admits(gate, who, 2) == [True, True]
    gate.forwarded("k")
    gate.on_folded(_recorded(_done("k", 1, 1), "b"), RouterState())
    assert _admits(gate, who, 1) == [False]  # 2 in the window, not 3: one more would be
    gate.forwarded("k")
    assert _admits(gate, who, 2) == [True, False]


def test_a_request_recorded_here_without_admission_counts_whole() -> None:
    """Another node forwarded it here (admitted there): its record here counts the request."""
    gate = _gate()
    gate.on_folded(_recorded(_done("k"), "a"), RouterState())
    assert gate.admit(Principal("k", KeyScope(rpm=1))) is not None


def test_unlimited_callers_and_unnamed_records_are_not_counted() -> None:
    """Full keys and scopes without limits pass uncounted; anonymous/full/older records are ignored."""
    gate = _gate()
    assert _admits(gate, Principal(FULL), 5) == [True] * 5
    assert _admits(gate, Principal("free", KeyScope()), 5) == [True] * 5
    for key in (None, "anonymous", FULL):
        gate.on_folded(_recorded(_done(key, 100, 100), "b"), RouterState())
    assert gate.admit(Principal(FULL, KeyScope(rpm=1))) is None
    assert gate.admit(Principal("free", KeyScope(rpm=1))) is None


def test_only_inference_routes_are_counted() -> None:
    """A listing or an admin route passes a limited key uncounted."""
    gate, who = _gate(), Principal("k", KeyScope(rpm=1))
    assert gate.admit_request(who, "GET", "/v1/models") is None
    assert gate.admit_request(who, "POST", "/models/load") is None
    assert gate.admit_request(who, "POST", "/api/chat") is None
    refusal = gate.admit_request(who, "POST", "/v1/messages")
    assert refusal is not None and refusal.status == 429


async def test_attach_rebuilds_the_window_from_the_log_and_counts_each_event_once(db_path: Path) -> None:
    """request_completed already in the log count (a restart forgets nothing); those folded after
    attach count through the tail; none counts twice; outside the window, none counts."""
    store = AsyncEventStore(db_path, source={"kind": "router"}, synchronous="NORMAL")
    live = LiveState(store)
    try:
        await store.append([NewEvent(_done("k", 2, 1), "m")])
        await live.start()
        gate = RateGate(None)
        await gate.attach(live, store)
        [position] = await store.append([NewEvent(_done("k", 2, 1), "m")])
        await live.wait_for(position)
        who = Principal("k", KeyScope(rpm=3))
        assert _admits(gate, who, 2) == [True, False]  # 2 recorded + this one: 3
        later = RateGate(None, window=60, clock=lambda: time.time() + 61)
        await later.attach(live, store)
        assert _admits(later, who, 3) == [True, True, True]
    finally:
        await live.stop()
        await store.close()


def test_uses_leave_the_window_in_time_order_whatever_order_they_arrived_in() -> None:
    """Another node's older record arriving after a newer admission still leaves the window first."""
    now = [NOW]
    gate, who = RateGate("a", clock=lambda: now[0]), Principal("k", KeyScope(rpm=2))
    assert _admits(gate, who, 1) == [True]
    gate.on_folded(_recorded(_done("k"), "b", at=NOW - 30), RouterState())
    assert _admits(gate, who, 1) == [False]
    now[0] = NOW + 31  # the older record has left, the admission has not
    assert _admits(gate, who, 2) == [True, False]
    now[0] = NOW + 92  # everything has left
    assert _admits(gate, who, 2) == [True, True]
