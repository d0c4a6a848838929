"""The fair queues' waiting (service.supervision.fair_gate): turns handed out as the core decides,
slots given back, clients that leave or wait too long, and the queue limit."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from service.core.errors import CommandRejected
from service.supervision.fair_gate import FairGate


def _gate(max_queued: int = 0, elsewhere: int = 0) -> FairGate:
    return FairGate(max_queued, 60.0, lambda: elsewhere)


async def _until(predicate: Callable[[], bool], what: str) -> None:
    """Let the other tasks run until ``predicate`` holds (a signal, not a sleep)."""
    try:
        async with asyncio.timeout(10):
            while not predicate():
                await asyncio.sleep(0)
    except TimeoutError:
        raise AssertionError(what) from None


class Entered:
    """Requests that entered, in the order they were let in."""

    def __init__(self, gate: FairGate) -> None:
        self.gate = gate
        self.order: list[str] = []

    def start(self, name: str, key: str, priority: int = 0, timeout: float = 30.0) -> asyncio.Task[None]:
        async def enter() -> None:
            await self.gate.enter(name, "m", key, priority, 1, timeout)
            self.order.append(name)

        return asyncio.create_task(enter())

    async def let_in(self, name: str) -> None:
        await _until(lambda: name in self.order, f"{name} let in")


class TestTurns:
    async def test_a_free_slot_is_entered_without_waiting(self) -> None:
        gate = _gate()
        await asyncio.wait_for(gate.enter("r1", "m", "a", 0, 2, 1.0), 1.0)
        await asyncio.wait_for(gate.enter("r2", "m", "b", 0, 2, 1.0), 1.0)
        assert gate.running("m") == 2 and gate.waiting == 0

    async def test_another_key_s_request_goes_before_a_batch_that_queued_first(self) -> None:
        gate = _gate()
        entered = Entered(gate)
        await gate.enter("a0", "m", "a", 0, 1, 1.0)  # a's first holds the one slot
        batch = [entered.start(f"a{i}", "a") for i in range(1, 6)]
        await _until(lambda: gate.waiting == 5, "a's batch waits")
        chat = entered.start("b1", "b")
        await _until(lambda: gate.waiting == 6, "b waits")
        gate.release("a0")
        await chat
        assert entered.order == ["b1"], "b's one request is let in at the first free slot"
        for name in ("b1", "a1", "a2", "a3", "a4"):
            await entered.let_in(name)
            gate.release(name)
        await asyncio.gather(*batch)
        assert entered.order == ["b1", "a1", "a2", "a3", "a4", "a5"]
        gate.release("a5")
        assert gate.running("m") == 0 and gate.waiting == 0

    async def test_a_higher_priority_goes_first(self) -> None:
        gate = _gate()
        entered = Entered(gate)
        await gate.enter("hold", "m", "x", 0, 1, 1.0)
        tasks = [entered.start("low", "batch", 0), entered.start("high", "chat", 9)]
        await _until(lambda: gate.waiting == 2, "both wait")
        gate.release("hold")
        await _until(lambda: entered.order == ["high"], "the higher priority let in")
        gate.release("high")
        await asyncio.gather(*tasks)
        assert entered.order == ["high", "low"]

    async def test_releasing_a_holder_never_let_in_changes_nothing(self) -> None:
        gate = _gate()
        await gate.enter("r1", "m", "a", 0, 1, 1.0)
        gate.release("stranger")
        gate.release("r1")
        gate.release("r1")  # twice: the slot is given back once
        assert gate.running("m") == 0


class TestLeaving:
    async def test_a_client_that_hangs_up_leaves_the_queue(self) -> None:
        gate = _gate()
        entered = Entered(gate)
        await gate.enter("r1", "m", "a", 0, 1, 1.0)
        gone = entered.start("gone", "b")
        later = entered.start("later", "c")
        await _until(lambda: gate.waiting == 2, "both wait")
        gone.cancel()
        with pytest.raises(asyncio.CancelledError):
            await gone
        assert gate.waiting == 1
        gate.release("r1")
        await later
        assert entered.order == ["later"]

    async def test_one_let_in_as_it_hangs_up_passes_its_slot_on(self) -> None:
        gate = _gate()
        entered = Entered(gate)
        await gate.enter("r1", "m", "a", 0, 1, 1.0)
        gone = entered.start("gone", "b")
        later = entered.start("later", "c")
        await _until(lambda: gate.waiting == 2, "both wait")
        gate.release("r1")  # lets "gone" in: its turn is set, its task not yet run
        gone.cancel()
        with pytest.raises(asyncio.CancelledError):
            await gone
        await asyncio.wait_for(later, 5)
        assert entered.order == ["later"] and gate.running("m") == 1

    async def test_waiting_too_long_is_the_capacity_refusal(self) -> None:
        gate = _gate()
        await gate.enter("r1", "m", "a", 0, 1, 1.0)
        with pytest.raises(CommandRejected) as refused:
            await gate.enter("slow", "m", "b", 0, 1, 0.05)
        assert refused.value.code == "capacity" and "no slot for model 'm'" in str(refused.value)
        assert gate.waiting == 0 and gate.running("m") == 1

    async def test_a_full_queue_refuses_at_once_counting_requests_waiting_for_a_load(self) -> None:
        gate = _gate(max_queued=3, elsewhere=1)
        entered = Entered(gate)
        await gate.enter("r1", "m", "a", 0, 1, 1.0)  # a free slot: never refused
        tasks = [entered.start("w1", "a"), entered.start("w2", "b")]
        await _until(lambda: gate.waiting == 2, "two wait")
        with pytest.raises(CommandRejected) as refused:
            await gate.enter("w3", "m", "c", 0, 1, 1.0)
        assert refused.value.code == "capacity" and "max_queued_requests=3" in str(refused.value)
        assert gate.waiting == 2
        gate.release("r1")
        for name in ("w2", "w1"):  # b was never served, a was (r1)
            await entered.let_in(name)
            gate.release(name)
        await asyncio.gather(*tasks)
        assert gate.running("m") == 0
