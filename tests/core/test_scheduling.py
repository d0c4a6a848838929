"""Who gets a slot: ``plan_slots`` over the fold plus in-memory facts."""

from __future__ import annotations

from service.core import events as ev
from service.core.fold import replay
from service.core.scheduling import Demand, SlotFacts, can_ever_start, plan_slots
from service.core.state import RouterState
from tests.core.examples import example
from tests.core.test_lifecycles import log


def _discovered(name: str) -> tuple[ev.Event, str]:
    return example(ev.ModelDiscovered, source="models_dir", path=f"/m/{name}.gguf", size=1), name


def _ready(name: str, iid: str) -> list[tuple[ev.Event, str]]:
    return [
        (example(ev.InstanceRequested, instance_id=iid), name),
        (example(ev.InstanceLoading, instance_id=iid), name),
        (example(ev.InstanceReady, instance_id=iid, endpoint="http://x"), name),
    ]


def world(*loaded: str, loading: tuple[str, ...] = (), stopping: tuple[str, ...] = ()) -> RouterState:
    """Models a..e on disk; ``loaded`` are ready in that order (first = least recently used)."""
    entries: list[tuple[ev.Event, str]] = [_discovered(n) for n in "abcde"]
    for _i, name in enumerate(loaded):
        entries += _ready(name, f"i-{name}")
    for name in loading:
        entries.append((example(ev.InstanceRequested, instance_id=f"i-{name}"), name))
    for name in stopping:
        entries.append((ev.InstanceStopRequested(instance_id=f"i-{name}"), name))
    return replay(log(*entries))


def facts(models_max: int = 1, busy: dict[str, int] | None = None, exiting: int = 0) -> SlotFacts:
    return SlotFacts(models_max=models_max, busy=busy or {}, exiting=exiting)


def test_a_free_slot_is_given_to_the_oldest_demand() -> None:
    plan = plan_slots(world(), [Demand("b"), Demand("c")], facts(models_max=1))
    assert [d.model for d in plan.start] == ["b"] and plan.evict == ()


def test_at_capacity_the_least_recently_used_idle_model_is_evicted() -> None:
    plan = plan_slots(world("a", "b"), [Demand("c")], facts(models_max=2))
    assert plan.start == () and plan.evict == ("a",)


def test_a_busy_model_is_never_evicted() -> None:
    plan = plan_slots(world("a", "b"), [Demand("c")], facts(models_max=2, busy={"a": 1}))
    assert plan.evict == ("b",)
    assert plan_slots(world("a"), [Demand("c")], facts(busy={"a": 2})).evict == ()


def test_a_loading_model_is_never_evicted() -> None:
    assert plan_slots(world(loading=("a",)), [Demand("c")], facts()).evict == ()


def test_a_model_awaited_by_a_demand_is_not_evicted_before_its_request_is_served() -> None:
    """llama.cpp #28698: b became ready for its waiters; c must not take its slot first."""
    plan = plan_slots(world("a", "b"), [Demand("b", started="i-b"), Demand("c")], facts(models_max=2))
    assert plan.evict == ("a",)
    plan = plan_slots(world("b"), [Demand("b", started="i-b"), Demand("c")], facts(models_max=1))
    assert plan.evict == ()


def test_a_slot_being_freed_is_claimed_before_anything_else_is_evicted() -> None:
    """An eviction already under way serves the oldest demand: N waiters, one eviction."""
    plan = plan_slots(world("a", "b", stopping=("a",)), [Demand("c")], facts(models_max=2))
    assert plan == plan.__class__()  # wait for a's slot
    plan = plan_slots(world("b"), [Demand("c")], facts(models_max=1, exiting=1))
    assert plan.evict == () and plan.start == ()


def test_a_reaped_slot_is_not_free_until_the_process_is_gone() -> None:
    assert plan_slots(world(), [Demand("a")], facts(models_max=1, exiting=1)).start == ()
    assert [d.model for d in plan_slots(world(), [Demand("a")], facts(models_max=1)).start] == ["a"]


def test_two_demands_with_one_idle_model_to_give_up_take_turns() -> None:
    """First c gets a's slot (one eviction); d waits, it does not evict c's predecessor twice."""
    plan = plan_slots(world("a"), [Demand("c"), Demand("d")], facts(models_max=1))
    assert plan.evict == ("a",) and plan.start == ()


def test_later_demands_never_overtake_an_earlier_one_that_waits() -> None:
    plan = plan_slots(world("a"), [Demand("c"), Demand("d")], facts(models_max=1, busy={"a": 1}))
    assert plan.start == () and plan.evict == ()


def test_a_demand_that_may_not_start_protects_but_does_not_load() -> None:
    """Requests with autoload off wait for a loading model without starting anything."""
    plan = plan_slots(world(), [Demand("a", start=False)], facts(models_max=1))
    assert plan.start == ()
    plan = plan_slots(world("a", "b"), [Demand("b", start=False), Demand("c")], facts(models_max=2))
    assert plan.evict == ("a",)


def test_unlimited_slots_start_everything() -> None:
    plan = plan_slots(world("a", "b"), [Demand("c"), Demand("d")], facts(models_max=0))
    assert [d.model for d in plan.start] == ["c", "d"]


def test_an_explicit_load_can_start_only_if_a_slot_can_be_freed() -> None:
    assert can_ever_start(world("a"), "c", facts(models_max=1))
    assert not can_ever_start(world("a"), "c", facts(models_max=1, busy={"a": 1}))
    assert not can_ever_start(world(loading=("a",)), "c", facts(models_max=1))
    assert can_ever_start(world("a", stopping=("a",)), "c", facts(models_max=1))
