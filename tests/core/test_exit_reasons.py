"""A worker's end, explained: each signal's usual cause in an inference worker, and what to do."""

from __future__ import annotations

import signal
from datetime import UTC, datetime

from service.core import events as ev
from service.core.exit_reasons import explain_exit, shell_exit_code, signal_name
from service.core.fold import fold
from service.core.instance_lifecycle import CRASH_LOOP, crash_loop, crash_rejection
from service.core.state import RouterState
from tests.core.examples import example

AT = datetime(2026, 12, 1, tzinfo=UTC)


class TestExplainExit:
    def test_sigsegv_names_the_signal_and_the_usual_build_cause(self) -> None:
        why = explain_exit(None, signal.SIGSEGV)
        assert why.reason == "SIGSEGV" and why.exit_code == 139
        assert "killed by SIGSEGV" in why.message and "built for another CPU" in why.message
        assert "AMX" in why.message and "make clean install" in why.hint

    def test_sigill_is_an_instruction_this_cpu_cannot_run(self) -> None:
        why = explain_exit(None, signal.SIGILL, first_request=True)
        assert why.reason == "SIGILL" and "on its first request" in why.message
        assert "instruction this CPU cannot run" in why.message and "rebuild" in why.hint

    def test_sigkill_with_the_oom_count_risen_is_the_oom_killer_with_the_memory_it_held(self) -> None:
        why = explain_exit(None, signal.SIGKILL, max_rss_bytes=3 * 1024**3, oom_killed=True)
        assert "out-of-memory killer" in why.message and "3.0 GiB" in why.message
        assert "smaller quantization" in why.hint

    def test_sigkill_without_an_oom_kill_says_it_was_not_the_oom_killer(self) -> None:
        why = explain_exit(None, signal.SIGKILL, max_rss_bytes=200 * 1024**2, oom_killed=False)
        assert "not by the kernel's out-of-memory killer" in why.message and "200 MiB" in why.message

    def test_sigkill_when_the_count_is_unknown_says_usually(self) -> None:
        assert "usually by the kernel's out-of-memory killer" in explain_exit(None, signal.SIGKILL).message

    def test_an_exit_code_points_at_stderr(self) -> None:
        why = explain_exit(3, None)
        assert why.reason == "exit code 3" and why.exit_code == 3 and "stderr" in why.hint

    def test_names_and_shell_codes(self) -> None:
        assert signal_name(signal.SIGABRT) == "SIGABRT" and signal_name(250) == "signal 250"
        assert shell_exit_code(None, 9) == 137 and shell_exit_code(2, None) == 2 and shell_exit_code(None, None) == 1


def _fold(*events: tuple[ev.Event, str | None]) -> RouterState:
    state = RouterState()
    for i, (event, model) in enumerate(events, start=1):
        state = fold(state, ev.Recorded(i, f"e{i}", model, event, {"kind": "test"}, AT))
    return state


def _discovered() -> tuple[ev.Event, str]:
    return example(ev.ModelDiscovered, path="/m/a.gguf", source="models_dir"), "a"


def _ready(iid: str) -> list[tuple[ev.Event, str]]:
    return [(example(ev.InstanceRequested, instance_id=iid), "a"), (example(ev.InstanceReady, instance_id=iid), "a")]


def _crash(iid: str, in_flight: int, sig: int = signal.SIGSEGV) -> tuple[ev.Event, str]:
    return ev.InstanceCrashed(instance_id=iid, signal=sig, stderr_tail="a\nb\n", requests_in_flight=in_flight), "a"


class TestFirstRequestCrashes:
    def test_a_crash_serving_its_first_request_is_marked_and_explained(self) -> None:
        state = _fold(_discovered(), *_ready("i1"), _crash("i1", in_flight=1))
        model = state.models["a"]
        error = model.last_error.to_json() if model.last_error else {}
        assert model.failed and model.first_request_crashes == 1
        assert error["first_request"] is True and error["signal_name"] == "SIGSEGV" and error["status_code"] == 139
        assert "on its first request" in error["message"] and error["hint"]

    def test_a_crash_with_no_request_in_flight_or_after_one_answered_is_not_a_first_request_crash(self) -> None:
        idle = _fold(_discovered(), *_ready("i1"), _crash("i1", in_flight=0))
        assert idle.models["a"].first_request_crashes == 0
        served = example(ev.RequestCompleted, instance_id="i1", status_code=200), "a"
        later = _fold(_discovered(), *_ready("i1"), served, _crash("i1", in_flight=1))
        assert later.models["a"].first_request_crashes == 0

    def test_two_in_a_row_refuse_autoload_with_the_reason_and_an_answered_request_ends_the_loop(self) -> None:
        events = [_discovered(), *_ready("i1"), _crash("i1", 1), *_ready("i2"), _crash("i2", 1)]
        state = _fold(*events)
        assert state.models["a"].first_request_crashes == CRASH_LOOP
        refusal = crash_loop(state.models["a"])
        assert refusal is not None and refusal.code == "model_failed" and refusal.extra["reason"] == "crash_loop"
        assert "SIGSEGV" in refusal.message and "POST /models/load" in refusal.message
        served = example(ev.RequestCompleted, instance_id="i3", status_code=200), "a"
        recovered = _fold(*events, *_ready("i3"), served)
        assert recovered.models["a"].first_request_crashes == 0 and crash_loop(recovered.models["a"]) is None

    def test_the_rejection_of_a_crashed_request_carries_the_stderr_lines(self) -> None:
        state = _fold(_discovered(), *_ready("i1"), _crash("i1", 1))
        rejected = crash_rejection(state.models["a"])
        assert rejected is not None and rejected.extra["stderr_tail"] == ["a", "b"]
        assert rejected.extra["signal"] == "SIGSEGV" and rejected.extra["exit_code"] == 139
