"""The start-up loads still owed (single-model ``/health``'s "Loading model" between a download and its load)."""

from __future__ import annotations

from service.core import events as ev
from service.supervision.startup_loads import StartupLoads
from tests.core.test_lifecycles import AVAILABLE, READY, T0, M, state_of


def _recorded(position: int, event: ev.Event) -> ev.Recorded:
    return ev.Recorded(position, f"e{position}", M, event, {}, T0)


def test_a_start_up_load_is_owed_until_its_first_instance_ready() -> None:
    loads = StartupLoads()
    downloaded = state_of(AVAILABLE)
    loads.expect([M, "other"], downloaded)
    loads.retain([M])  # "other" was refused: not owed
    assert loads.waiting == {M}
    loads.on_event(_recorded(1, ev.InstanceRequested(instance_id="i1", port=1)), downloaded)
    assert loads.waiting == {M}, "requested is not ready"
    ready = READY[-1]
    assert isinstance(ready, ev.InstanceReady)
    loads.on_event(_recorded(2, ready), state_of(*READY))
    assert loads.waiting == frozenset()


def test_a_model_already_loaded_is_not_waited_for() -> None:
    loads = StartupLoads()
    loads.expect([M], state_of(*READY))
    assert loads.waiting == frozenset()
