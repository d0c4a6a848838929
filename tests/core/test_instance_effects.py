"""What the supervisor does while it carries out a spawn or a stop, decided over the fold of that moment.

Given events, when a spawn comes round (or has just finished), or a worker is to be stopped,
then this. No fixtures: the fold of a short log.
"""

from __future__ import annotations

import pytest

from service.core import events as ev
from service.core.instance_effects import (
    PROMPT_CACHE_SAVE_S,
    STOP_GRACE_S,
    StopOrder,
    kill_spawned,
    spawn_wanted,
    stop_order,
)
from tests.core.examples import example
from tests.core.test_placement import held, ready, world

REQUESTED = [(example(ev.InstanceRequested, instance_id="i-m"), "m", None)]


class TestASpawn:
    def test_a_requested_instance_is_spawned(self) -> None:
        assert spawn_wanted(world(held("m"), REQUESTED), "m", "i-m")

    def test_one_stopped_before_its_spawn_came_round_is_skipped(self) -> None:
        stopping = world(held("m"), REQUESTED, [(ev.InstanceStopRequested(instance_id="i-m"), "m", None)])
        assert not spawn_wanted(stopping, "m", "i-m")

    def test_one_replaced_or_ended_meanwhile_is_skipped(self) -> None:
        state = world(held("m"), REQUESTED)
        assert not spawn_wanted(state, "m", "i-old"), "another instance now"
        assert not spawn_wanted(state, "gone", "i-m"), "no such model any more"

    def test_a_worker_whose_instance_ended_while_it_spawned_is_killed_at_once(self) -> None:
        failed = [(ev.InstanceLoadFailed(instance_id="i-m", message="load_timeout"), "m", None)]
        assert kill_spawned(world(held("m"), REQUESTED, failed), "m", "i-m")

    def test_one_whose_instance_still_stands_is_kept(self) -> None:
        assert not kill_spawned(world(held("m"), REQUESTED), "m", "i-m")
        stopping = world(held("m"), REQUESTED, [(ev.InstanceStopRequested(instance_id="i-m"), "m", None)])
        assert not kill_spawned(stopping, "m", "i-m"), "a stop in progress ends it the usual way"


class TestAStop:
    def test_the_line_carries_the_recorded_reason(self) -> None:
        evicted = world(
            held("m"), ready("m"), [(ev.InstanceStopRequested(instance_id="i-m", reason="evicted"), "m", None)]
        )
        assert stop_order(evicted, "i-m", 10.0) == StopOrder("stop evicted", STOP_GRACE_S, 10.0)

    def test_without_a_recorded_reason_it_is_an_unload(self) -> None:
        assert stop_order(world(held("m"), ready("m")), "i-m", 10.0).line == "stop unload"
        assert stop_order(world(held("m")), "i-gone", 10.0) == StopOrder("stop unload", STOP_GRACE_S, 10.0)

    def test_the_models_own_stop_timeout_wins_over_the_global_one(self) -> None:
        own = [(example(ev.ModelConfigured, stop_timeout=3.0), "m", None)]
        assert stop_order(world(held("m"), own, ready("m")), "i-m", 10.0, cache_disk_max=0).timeout == 3.0
        assert stop_order(world(held("m"), ready("m")), "i-m", 10.0).timeout == 10.0

    def test_a_timeout_shorter_than_the_grace_shortens_the_grace(self) -> None:
        stopped = stop_order(world(held("m"), ready("m")), "i-m", 0.05, cache_disk_max=0)
        assert stopped == StopOrder("stop unload", 0.05, 0.05)

    @pytest.mark.parametrize("reason", ["evicted", "ttl", "keep_alive", "sleep", "unload", "shutdown"])
    def test_a_worker_saving_its_prompt_cache_gets_the_save_bound_and_a_margin(self, reason: str) -> None:
        stop = [(ev.InstanceStopRequested(instance_id="i-m", reason=reason), "m", None)]
        own = [(example(ev.ModelConfigured, stop_timeout=1.0), "m", None)]
        order = stop_order(world(held("m"), own, ready("m"), stop), "i-m", 10.0)  # the launch's default: 2 GiB
        assert order.line == f"stop {reason}"
        assert order.timeout >= PROMPT_CACHE_SAVE_S + 2
        assert stop_order(world(held("m"), own, ready("m"), stop), "i-m", 10.0, cache_disk_max=0).timeout == 1.0
