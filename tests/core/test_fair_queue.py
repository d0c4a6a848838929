"""Who goes next into a model's worker when named keys share it (service.core.fair_queue):
round-robin across keys, a higher priority first, first in first out within a key, leaving."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from types import MappingProxyType

from hypothesis import given
from hypothesis import strategies as st

from service.core import fair_queue as fq
from service.core.keys import ANONYMOUS, FULL, KeyScope, NamedKey

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _key(name: str, priority: int = 0) -> NamedKey:
    return NamedKey(name, "0123456789ab", "00", "digest", KeyScope(priority=priority), T0)


def _queue(*waiters: tuple[str, int]) -> fq.FairQueue:
    queue = fq.FairQueue()
    for ticket, (key, priority) in enumerate(waiters, start=1):
        queue = fq.join(queue, fq.Waiter(ticket, key, priority))
    return queue


def _order(queue: fq.FairQueue) -> list[int]:
    """The tickets in the order they are served, the queue emptied."""
    served: list[int] = []
    while True:
        queue, chosen = fq.serve(queue)
        if chosen is None:
            return served
        served.append(chosen.ticket)


KEYS = {"batch": _key("batch")}


class TestGated:
    def test_without_named_keys_nothing_waits_in_the_router(self) -> None:
        """Anonymous and full-key traffic keeps the worker's arrival order: llama.cpp's router rules."""
        assert not fq.gated({}, "POST", "/v1/chat/completions")

    def test_with_named_keys_every_route_that_runs_the_model_waits_its_turn(self) -> None:
        for path in ("/v1/chat/completions", "/completion", "/v1/embeddings", "/v1/messages", "/api/chat", "/rerank"):
            assert fq.gated(KEYS, "POST", path), path

    def test_routes_that_take_no_slot_never_wait(self) -> None:
        for method, path in [
            ("POST", "/tokenize"),
            ("POST", "/detokenize"),
            ("POST", "/apply-template"),
            ("POST", "/v1/messages/count_tokens"),
            ("GET", "/slots"),
            ("GET", "/props"),
            ("POST", "/slots/0"),
            ("GET", "/metrics"),
        ]:
            assert not fq.gated(KEYS, method, path), path

    def test_priority_is_the_scope_s_and_zero_for_full_anonymous_and_gone_keys(self) -> None:
        keys = {"chat": _key("chat", priority=5)}
        assert fq.priority_of(keys, "chat") == 5
        assert fq.priority_of(keys, FULL) == fq.priority_of(keys, ANONYMOUS) == fq.priority_of(keys, "revoked") == 0


class TestNext:
    def test_an_empty_queue_has_nobody_next(self) -> None:
        assert fq.next_waiter(fq.FairQueue()) is None
        assert fq.serve(fq.FairQueue()) == (fq.FairQueue(), None)

    def test_one_key_is_served_first_in_first_out(self) -> None:
        assert _order(_queue(("a", 0), ("a", 0), ("a", 0))) == [1, 2, 3]

    def test_keys_take_turns_whatever_their_arrival(self) -> None:
        """A's batch of four came first; B's two and C's one each wait one turn, not four."""
        queue = _queue(("a", 0), ("a", 0), ("a", 0), ("a", 0), ("b", 0), ("b", 0), ("c", 0))
        assert _order(queue) == [1, 5, 7, 2, 6, 3, 4]

    def test_a_key_that_comes_back_still_takes_turns(self) -> None:
        """A key served least recently goes next: B, served after A last, waits for A's next turn."""
        queue = _queue(("a", 0), ("a", 0), ("a", 0))
        queue, first = fq.serve(queue)  # a(1)
        queue = fq.join(queue, fq.Waiter(10, "b", 0))
        queue, second = fq.serve(queue)  # b: never served
        queue = fq.join(queue, fq.Waiter(11, "b", 0))  # b again while its first runs
        queue, third = fq.serve(queue)  # a: served before b's last turn
        queue, fourth = fq.serve(queue)
        assert [w.ticket for w in (first, second, third, fourth) if w] == [1, 10, 2, 11]

    def test_a_higher_priority_goes_first_then_turns_among_equals(self) -> None:
        queue = _queue(("batch", 0), ("batch", 0), ("chat", 5), ("ide", 5), ("chat", 5))
        assert _order(queue) == [3, 4, 5, 1, 2]

    def test_full_and_anonymous_are_keys_of_their_own(self) -> None:
        queue = _queue((FULL, 0), (FULL, 0), (ANONYMOUS, 0), ("a", 0))
        assert _order(queue) == [1, 3, 4, 2]

    def test_a_waiter_that_leaves_is_never_served(self) -> None:
        queue = fq.leave(_queue(("a", 0), ("b", 0), ("a", 0)), 2)
        assert _order(queue) == [1, 3]
        assert fq.leave(queue, 99) == queue  # gone already: nothing changes


class TestGate:
    def test_a_free_slot_lets_the_newcomer_in_at_once(self) -> None:
        gate, admitted = fq.arrive(fq.Gate(), fq.Waiter(1, "a"), capacity=2)
        assert admitted == (1,) and gate.running == 1 and not gate.queue.waiting

    def test_no_more_than_the_slots_go_in_the_rest_wait_their_turn(self) -> None:
        gate = fq.Gate()
        for ticket, key in enumerate(["a", "a", "a", "b"], start=1):
            gate, _ = fq.arrive(gate, fq.Waiter(ticket, key), capacity=1)
        assert gate.running == 1 and [w.ticket for w in gate.queue.waiting] == [2, 3, 4]
        gate, admitted = fq.finish(gate)
        assert admitted == (4,), "b's one request goes before a's second"
        gate, admitted = fq.finish(gate)
        assert admitted == (2,) and gate.running == 1

    def test_a_waiter_that_departs_leaves_the_slots_as_they_were(self) -> None:
        gate, _ = fq.arrive(fq.Gate(), fq.Waiter(1, "a"), capacity=1)
        gate, admitted = fq.arrive(gate, fq.Waiter(2, "b"), capacity=1)
        assert admitted == ()
        gate = fq.depart(gate, 2)
        assert gate.running == 1 and not gate.queue.waiting
        gate, admitted = fq.finish(gate)
        assert admitted == () and gate.idle

    def test_more_slots_let_more_in(self) -> None:
        gate = fq.Gate()
        for ticket in range(1, 4):
            gate, _ = fq.arrive(gate, fq.Waiter(ticket, "a"), capacity=1)
        gate, admitted = fq.arrive(gate, fq.Waiter(4, "b"), capacity=3)  # the model reloaded with -np 3
        assert admitted == (4, 2) and gate.running == 3

    @given(st.integers(0, 3), st.integers(1, 4), st.dictionaries(st.sampled_from("abc"), st.integers(0, 9)))
    def test_the_way_straight_in_decides_as_the_general_one(
        self, running: int, capacity: int, served: dict[str, int]
    ) -> None:
        """A differential test of :func:`fq.arrive`'s fast path (nobody waits) against :func:`fq.admit`."""
        gate = fq.Gate(capacity, running, fq.FairQueue((), MappingProxyType(served), turn=10))
        waiter = fq.Waiter(7, "a", 1)
        general = fq.admit(replace(gate, queue=fq.join(gate.queue, waiter)))
        assert fq.arrive(gate, waiter, capacity) == general

    @given(
        st.lists(st.tuples(st.sampled_from("abc"), st.integers(0, 2), st.booleans()), max_size=30),
        st.integers(1, 4),
    )
    def test_never_more_inside_than_slots_and_never_a_free_slot_while_someone_waits(
        self, steps: list[tuple[str, int, bool]], capacity: int
    ) -> None:
        gate, inside, everyone = fq.Gate(), 0, list[int]()
        for ticket, (key, priority, ends) in enumerate(steps, start=1):
            if ends and inside:
                gate, admitted = fq.finish(gate)
                inside -= 1
            else:
                gate, admitted = fq.arrive(gate, fq.Waiter(ticket, key, priority), capacity)
            inside += len(admitted)
            everyone += admitted
            assert gate.running == inside <= capacity
            assert inside == capacity or not gate.queue.waiting
        assert len(everyone) == len(set(everyone))
