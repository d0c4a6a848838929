"""llama-server's ``--sleep-idle-seconds`` as lifecycle decisions, and router versus single-model mode."""

from __future__ import annotations

from datetime import timedelta

import pytest

from service.core import events as ev
from service.core.demand_queue import Demanded, Queue
from service.core.errors import CommandRejected
from service.core.instance_decisions import Facts, Limits, Sleep, decide_acquire, decide_timers, decide_unload
from service.core.server_mode import (
    LOADING,
    MISSING_MODEL,
    ROUTER,
    decide_mode,
    listed,
    listed_aliases,
    not_serving,
    served_name,
    target_model,
    worker_log_prefix,
)
from service.core.state import ModelStatus, RouterState
from tests.core.examples import example
from tests.core.test_lifecycles import AVAILABLE, READY, T0, M, state_of

LIMITS = Limits(models_max=4, queue_timeout=30, max_queued_requests=8, load_timeout=60)
SLEEPY = example(ev.ModelConfigured, sleep_idle_seconds=10.0)
ASLEEP = (
    SLEEPY,
    *READY,
    ev.InstanceStopRequested(instance_id="i1", reason="sleep"),
    ev.InstanceStopped(instance_id="i1", reason="sleep"),
)


def _facts(seconds_after_ready: float, **busy: int) -> Facts:
    # READY's instance_ready is the fifth event (SLEEPY first), recorded at T0 + 5 s.
    return Facts(LIMITS, now=T0 + timedelta(seconds=5 + seconds_after_ready), mono=100.0, busy=busy)


def _state(*entries: ev.Event) -> RouterState:
    return state_of(*entries)


class TestSleep:
    def test_an_idle_ready_model_goes_to_sleep_once_its_seconds_passed(self) -> None:
        state = _state(SLEEPY, *READY)
        assert decide_timers(state, Queue(), _facts(9)).events == ()
        decided = decide_timers(state, Queue(), _facts(10))
        (stop,) = [a.event for a in decided.events]
        assert isinstance(stop, ev.InstanceStopRequested) and stop.reason == "sleep"
        assert decided.effects == (Sleep("i1", M, "http://x"),)

    def test_a_model_in_use_or_awaited_or_without_the_option_does_not_sleep(self) -> None:
        assert decide_timers(_state(SLEEPY, *READY), Queue(), _facts(60, **{M: 1})).events == ()
        assert decide_timers(_state(*READY), Queue(), _facts(3600)).events == ()

    def test_a_stop_for_sleep_leaves_the_model_sleeping_and_a_restart_keeps_it_so(self) -> None:
        state = _state(*ASLEEP)
        model = state.models[M]
        assert model.status is ModelStatus.SLEEPING and model.instance is None
        # kill -9 of the service while it sleeps: the next start replays the same log (no process to recover).
        after_restart = _state(*ASLEEP, example(ev.RouterStarted), example(ev.RecoveryCompleted))
        assert after_restart.models[M].status is ModelStatus.SLEEPING

    def test_a_request_wakes_a_sleeping_model_even_with_autoload_off(self) -> None:
        decided = decide_acquire(_state(*ASLEEP), Queue(), M, autoload=False, mine=None, facts=_facts(60), deadline=200)
        (demand,) = [e for e in decided.effects if isinstance(e, Demanded)]
        assert demand.reason == "wake" and demand.autoload
        with pytest.raises(CommandRejected, match="autoload is off"):
            decide_acquire(_state(AVAILABLE), Queue(), M, autoload=False, mine=None, facts=_facts(60), deadline=200)

    def test_any_new_instance_ends_the_sleep(self) -> None:
        state = _state(*ASLEEP, ev.InstanceRequested(instance_id="i2", port=2, reason="wake"))
        assert state.models[M].status is ModelStatus.LOADING and state.models[M].asleep_since is None

    def test_unloading_a_sleeping_model_ends_its_sleep(self) -> None:
        decided = decide_unload(_state(*ASLEEP), Queue(), M, "unload")
        assert decided.answer is None and [type(a.event) for a in decided.events] == [ev.SleepEnded]
        assert _state(*ASLEEP, ev.SleepEnded()).models[M].status is ModelStatus.UNLOADED
        with pytest.raises(CommandRejected):
            decide_unload(_state(*ASLEEP, ev.SleepEnded()), Queue(), M, "unload")

    def test_monitoring_reads_keep_no_model_awake(self) -> None:
        probed = _state(SLEEPY, *READY, example(ev.RequestCompleted, instance_id="i1", route="/metrics"))
        assert decide_timers(probed, Queue(), _facts(10)).effects == (Sleep("i1", M, "http://x"),)
        used = _state(SLEEPY, *READY, example(ev.RequestCompleted, instance_id="i1", route="/v1/chat/completions"))
        assert decide_timers(used, Queue(), _facts(10)).events == (), "a completion one second later counts"


class TestServerMode:
    def test_single_model_mode_sends_every_request_to_its_model(self) -> None:
        single = decide_mode("tiny")
        assert (
            single.single and target_model(single, "gpt-3.5-turbo") == "tiny" and target_model(single, None) == "tiny"
        )
        assert listed(single, "tiny") and not listed(single, "other")

    def test_the_single_models_first_alias_is_its_id(self) -> None:
        """llama-server keeps ``--alias`` in a ``std::set`` and names its model after the first:
        ``--alias tinyllama-2,fim,code`` is ``code``; without one the id is the model's name."""
        single = decide_mode("tiny", ("tinyllama-2", "fim", "code", "fim"))
        assert single.model_id == "code" and served_name(single, "tiny") == "code"
        assert listed_aliases(single, "tiny", ("tinyllama-2", "fim", "code")) == ["code", "fim", "tinyllama-2"]
        plain = decide_mode("tiny")
        assert served_name(plain, "tiny") == "tiny" and listed_aliases(plain, "tiny", ()) == ["tiny"]

    def test_router_mode_keeps_each_models_name_as_its_id(self) -> None:
        """llama.cpp's router starts each child with ``--alias NAME``: a preset's aliases stay other names."""
        assert ROUTER.model_id is None and served_name(ROUTER, "tiny") == "tiny"
        assert listed_aliases(ROUTER, "tiny", ("fast", "a")) == ["fast", "a"]

    def test_router_mode_needs_the_model_named_as_llama_cpp_says(self) -> None:
        assert decide_mode(None) is ROUTER and not ROUTER.single and listed(ROUTER, "any")
        assert target_model(ROUTER, " a ") == "a"
        with pytest.raises(CommandRejected, match=MISSING_MODEL):
            target_model(ROUTER, "  ")

    def test_health_says_loading_until_the_single_model_is_served(self) -> None:
        single = decide_mode(M)
        assert not_serving(ROUTER, _state()) is None
        assert not_serving(single, _state()) == LOADING
        assert not_serving(single, _state(AVAILABLE, ev.InstanceRequested(instance_id="i1", port=1))) == LOADING
        assert not_serving(single, _state(*READY)) is None
        assert not_serving(single, _state(*ASLEEP)) is None, "asleep: the next request wakes it"
        from_hub = example(ev.ModelConfigured, hf_repo="me/tiny-GGUF")
        assert _state(from_hub).models[M].status is ModelStatus.UNLOADED  # the next request would download it
        assert not_serving(single, _state(from_hub)) == LOADING, "-hf before its start-up download: not served"

    def test_health_says_loading_between_the_start_up_download_and_its_load(self) -> None:
        """Downloaded, not loaded yet: ``unloaded``, as a model unloaded after serving; only the
        start-up load still owed (``starting``) tells them apart."""
        single = decide_mode(M)
        downloaded = _state(AVAILABLE)
        assert downloaded.models[M].status is ModelStatus.UNLOADED
        assert not_serving(single, downloaded) is None, "unloaded after serving: the next request loads it"
        assert not_serving(single, downloaded, frozenset({M})) == LOADING
        assert not_serving(single, _state(*READY), frozenset({M})) is None


def test_worker_lines_are_bare_only_for_the_one_model_of_single_model_mode() -> None:
    """llama.cpp's router prefixes each child's lines; llama-server with one model prints its own bare."""
    single = decide_mode("user/repo:Q4_K_M")
    assert worker_log_prefix(single, "inference:user/repo:Q4_K_M:i-1") == ""
    assert worker_log_prefix(single, "download:job-1") == "[download:job-1] "
    assert worker_log_prefix(single, "inference:other:i-2") == "[inference:other:i-2] "
    assert worker_log_prefix(ROUTER, "inference:user/repo:Q4_K_M:i-1") == "[inference:user/repo:Q4_K_M:i-1] "
