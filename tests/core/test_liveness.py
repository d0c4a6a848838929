"""The hang decision (issue 29 §1): a worker that stops answering, or whose one step outlasts the
bound, is given up; a long step that the worker keeps answering through is not."""

from __future__ import annotations

from datetime import timedelta

from service.core import events as ev
from service.core.instance_decisions import Facts, Limits, Stop
from service.core.instance_exits import ArmRestart, decide_exit
from service.core.instance_hangs import CutRequests, decide_liveness, watched
from service.core.liveness import (
    ANSWER_S,
    DEFAULT_HANG_TIMEOUT,
    Beat,
    first_beat,
    heard,
    judge,
    unresponsive_rejection,
)
from service.core.processes import ProcessExit
from service.core.server_mode import ServerMode, not_serving
from service.core.state import UNRESPONSIVE, InstanceStatus, ModelStatus
from tests.core.examples import example
from tests.core.test_lifecycles import READY, T0, M, state_of

LIMITS = Limits(models_max=4, queue_timeout=30, max_queued_requests=8, load_timeout=60)


def _facts(mono: float, **busy: int) -> Facts:
    return Facts(LIMITS, now=T0 + timedelta(seconds=mono), mono=mono, busy=busy)


class TestJudge:
    def test_a_worker_that_answers_and_steps_is_alive(self) -> None:
        beat = heard(first_beat(0.0), 9.0, steps=40, step_s=0.05)
        assert judge(beat, 10.0, bound=5.0) is None

    def test_silence_past_the_bound_is_a_hang(self) -> None:
        beat = heard(first_beat(0.0), 2.0, steps=7, step_s=None)
        assert judge(beat, 7.0, bound=5.0) is None
        hang = judge(beat, 7.5, bound=5.0)
        assert hang is not None and hang.cause == "no_answer" and hang.silent_s == 5.5 and hang.steps == 7

    def test_a_long_step_answered_through_is_not_a_hang_until_it_outlasts_the_bound(self) -> None:
        """One long llama_decode: the HTTP thread answers every second, the step counter stays put."""
        beat = first_beat(0.0)
        for t in range(1, 5):
            beat = heard(beat, float(t), steps=3, step_s=float(t))
            assert judge(beat, t + 0.5, bound=5.0) is None
        assert beat.moved_at == 1.0  # the count moved once (0 -> 3), then stood still
        beat = heard(beat, 6.0, steps=3, step_s=6.0)
        hang = judge(beat, 6.0, bound=5.0)
        assert hang is not None and hang.cause == "step_stuck" and hang.last_step_s == 5.0

    def test_silence_is_capped_at_answer_s_whatever_the_step_bound(self) -> None:
        """A stopped worker under the default (long) step bound is given up after ANSWER_S of silence."""
        beat = heard(first_beat(0.0), 1.0, steps=3, step_s=None)
        assert judge(beat, 1.0 + ANSWER_S, bound=DEFAULT_HANG_TIMEOUT) is None
        hang = judge(beat, 1.5 + ANSWER_S, bound=DEFAULT_HANG_TIMEOUT)
        assert hang is not None and hang.cause == "no_answer"

    def test_work_waiting_with_no_step_begun_for_the_bound_is_a_hang(self) -> None:
        """The engine thread stuck between steps: the HTTP thread answers, requests wait, no step starts."""
        idle = heard(first_beat(0.0), 100.0, steps=9, step_s=None)  # idle for long: no progress owed
        assert judge(heard(idle, 200.0, steps=9, step_s=None), 200.0, bound=5.0) is None
        waiting = heard(idle, 201.0, steps=9, step_s=None, waiting=2)  # work arrives: progress owed from now
        assert judge(heard(waiting, 205.0, steps=9, step_s=None, waiting=2), 205.0, bound=5.0) is None
        hang = judge(heard(waiting, 206.5, steps=9, step_s=None, waiting=2), 206.5, bound=5.0)
        assert hang is not None and hang.cause == "no_progress" and hang.last_step_s == 5.5

    def test_a_bound_of_zero_never_judges(self) -> None:
        assert judge(Beat(seen_at=0.0), 1e6, bound=0.0) is None


class TestDecision:
    def test_a_hung_ready_worker_is_recorded_cut_and_stopped(self) -> None:
        state = state_of(*READY)
        beats = {"i1": Beat(seen_at=10.0, steps=12, moved_at=8.0)}
        assert decide_liveness(state, beats, _facts(14.0), 5.0).events == ()
        decided = decide_liveness(state, beats, _facts(16.0, **{M: 2}), 5.0)
        (seen,) = [a.event for a in decided.events]
        assert seen == ev.InstanceUnresponsive(
            instance_id="i1",
            cause="no_answer",
            bound_s=5.0,
            steps=12,
            last_step_s=8.0,
            silent_s=6.0,
            requests_waiting=2,
        )
        assert decided.effects == (CutRequests(M, "http://x"), Stop("i1"))

    def test_the_model_s_own_hang_timeout_wins(self) -> None:
        state = state_of(example(ev.ModelConfigured, hang_timeout=60.0), *READY)
        beats = {"i1": Beat(seen_at=10.0)}
        assert decide_liveness(state, beats, _facts(30.0), 5.0).events == ()
        assert watched(state, None, 0.0) == {"i1": "http://x"}  # on for this model though off globally
        off = state_of(example(ev.ModelConfigured, hang_timeout=0.0), *READY)
        assert decide_liveness(off, beats, _facts(1e6), 5.0).events == ()
        assert watched(off, None, 5.0) == {}

    def test_only_ready_workers_are_judged(self) -> None:
        stopping = state_of(*READY, ev.InstanceStopRequested(instance_id="i1"))
        assert decide_liveness(stopping, {"i1": Beat(seen_at=0.0)}, _facts(100.0), 5.0).events == ()
        assert watched(stopping, None, 5.0) == {}


HUNG = (
    *READY,
    example(ev.InstanceUnresponsive, instance_id="i1", bound_s=5.0, silent_s=6.0, steps=12, requests_waiting=2),
)


class TestFold:
    def test_unresponsive_shows_with_its_reason_then_the_model_fails_and_restarts(self) -> None:
        state = state_of(*HUNG)
        model = state.models[M]
        assert model.status is ModelStatus.UNRESPONSIVE
        assert model.instance is not None and model.instance.status is InstanceStatus.STOPPING
        assert model.last_error is not None and model.last_error.reason == UNRESPONSIVE
        assert "stopped responding" in model.last_error.message and "2 request(s) waiting" in model.last_error.message
        assert model.crash_count == 1
        rejection = unresponsive_rejection(model)
        assert rejection is not None and rejection.code == "model_failed" and "stopped responding" in rejection.message
        # SIGKILL after the stop grace: the service records the end, the model failed, its restart armed.
        killed = ProcessExit(exit_code=None, signal=9, stderr_tail="", forced=True)
        decided = decide_exit(state, M, "i1", killed, in_flight=2)
        (end,) = [a.event for a in decided.events]
        assert isinstance(end, ev.InstanceStopped) and end.reason == UNRESPONSIVE and end.forced
        assert decided.effects == (ArmRestart(M),)
        after = state_of(*HUNG, end)
        assert after.models[M].status is ModelStatus.FAILED and after.models[M].last_error == model.last_error

    def test_a_worker_that_recorded_its_own_end_still_arms_the_restart(self) -> None:
        state = state_of(*HUNG, ev.InstanceStopped(instance_id="i1", reason=UNRESPONSIVE))
        exited = ProcessExit(exit_code=0, signal=None, stderr_tail="")
        assert decide_exit(state, M, "i1", exited, in_flight=0).effects == (ArmRestart(M),)


def test_single_model_health_says_why_while_the_worker_is_given_up_and_after() -> None:
    single = ServerMode(M)
    for state in (state_of(*HUNG), state_of(*HUNG, ev.InstanceStopped(instance_id="i1", reason=UNRESPONSIVE))):
        why = not_serving(single, state)
        assert why is not None and "stopped responding" in why
