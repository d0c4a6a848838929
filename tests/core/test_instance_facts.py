"""Ids and ports are drawn before a decision and handed in: the plan takes them in order, says how
many it takes, and starts no more than were drawn.

Given events and a demand queue, when the planner decides over drawn ids and ports, then these
starts. No fixtures: the fold of a short log.
"""

from __future__ import annotations

from service.core import events as ev
from service.core import instance_decisions as decide
from service.core.decision import Decision
from service.core.demand_queue import Demanded, Queue, edit
from service.core.instance_facts import Drawn, Facts, Limits
from tests.core.test_lifecycles import T0
from tests.core.test_placement import GiB, held, joined, world

LIMITS = Limits(models_max=4, queue_timeout=60, max_queued_requests=0, load_timeout=300)


def _wanting(*models: str) -> Queue:
    queue = Queue()
    for i, model in enumerate(models):
        queue = edit(queue, Demanded(model, "autoload", float(i), waiter=True, autoload=True))
    return queue


def _requests(made: Decision[None]) -> list[tuple[str, int]]:
    return [(a.event.instance_id, a.event.port) for a in made.events if isinstance(a.event, ev.InstanceRequested)]


class TestDrawn:
    def test_each_start_takes_the_next_id_and_port_in_order(self) -> None:
        state = world(held("m"), held("n"))
        made = decide.decide_plan(state, _wanting("m", "n"), Facts(LIMITS, T0, 0.0), Drawn(("i1", "i2"), (9001, 9002)))
        assert _requests(made) == [("i1", 9001), ("i2", 9002)]
        assert [e.request.instance_id for e in made.effects if isinstance(e, decide.Spawn)] == ["i1", "i2"]

    def test_a_start_on_another_node_takes_an_id_and_no_port(self) -> None:
        state = world(joined("a", 8 * GiB), joined("b", 8 * GiB), held("m", "b"), held("n", "a"))
        facts = Facts(LIMITS, T0, 0.0, node="a", memory=8 * GiB)
        made = decide.decide_plan(state, _wanting("m", "n"), facts, Drawn(("i1", "i2"), (9001,)))
        assert _requests(made) == [("i1", 0), ("i2", 9001)]  # b picks its own port

    def test_the_stand_ins_tell_how_many_to_draw(self) -> None:
        state = world(joined("a", 8 * GiB), joined("b", 8 * GiB), held("m", "b"), held("n", "a"), held("o", "a"))
        facts = Facts(LIMITS, T0, 0.0, node="a", memory=8 * GiB)
        queue = _wanting("m", "n")
        made = decide.decide_plan(state, queue, facts, Drawn.enough_for(queue))
        assert decide.to_draw(made) == (2, 1)
        assert len(Drawn.enough_for(queue).ids) == 3, "one more for the demand a load adds"

    def test_nothing_to_start_draws_nothing(self) -> None:
        state = world(held("m"))
        assert decide.to_draw(
            decide.decide_plan(state, Queue(), Facts(LIMITS, T0, 0.0), Drawn.enough_for(Queue()))
        ) == (0, 0)

    def test_a_load_draws_for_its_own_start(self) -> None:
        state = world(held("m"))
        stand_ins = Drawn.enough_for(Queue())
        made = decide.decide_load(state, Queue(), "m", "load", Facts(LIMITS, T0, 0.0), stand_ins)
        assert decide.to_draw(made) == (1, 1)
        real = decide.decide_load(state, Queue(), "m", "load", Facts(LIMITS, T0, 0.0), Drawn(("i7",), (9007,)))
        assert _requests(real) == [("i7", 9007)]

    def test_a_plan_taken_again_over_a_newer_state_starts_only_what_was_drawn(self) -> None:
        state = world(held("m"), held("n"))
        made = decide.decide_plan(state, _wanting("m", "n"), Facts(LIMITS, T0, 0.0), Drawn(("i1",), (9001,)))
        assert _requests(made) == [("i1", 9001)], "n starts on the next pass"
        no_port = decide.decide_plan(state, _wanting("m", "n"), Facts(LIMITS, T0, 0.0), Drawn(("i1", "i2"), (9001,)))
        assert _requests(no_port) == [("i1", 9001)]

    def test_nothing_drawn_starts_nothing(self) -> None:
        state = world(held("m"))
        made = decide.decide_plan(state, _wanting("m"), Facts(LIMITS, T0, 0.0), Drawn())
        assert made.events == () and not any(isinstance(e, decide.Spawn) for e in made.effects)
