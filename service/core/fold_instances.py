"""The fold's handlers of inference-instance events (see :mod:`service.core.fold`)."""

from __future__ import annotations

from typing import Any

import service.core.events as ev
from service.core.devices import Offload
from service.core.exit_reasons import explain_exit
from service.core.fold_support import (
    failure,
    instance_of,
    model_of,
    on,
    put_model,
)
from service.core.instance_lifecycle import SLEEP
from service.core.liveness import HINT, Hang, message
from service.core.state import (
    UNRESPONSIVE,
    EngineStats,
    Failure,
    FailureKind,
    Instance,
    InstanceStatus,
    RouterState,
    evolve,
)

# --- instances ---------------------------------------------------------------


@on(ev.InstanceRequested)
def _instance_requested(state: RouterState, rec: ev.Recorded) -> RouterState:
    e = rec.event
    assert isinstance(e, ev.InstanceRequested)
    model = model_of(state, rec)
    if model is None:
        return state
    instance = Instance(
        instance_id=e.instance_id,
        reason=e.reason,
        port=e.port,
        params=dict(e.params),
        requested_at=rec.recorded_at,
        node=e.node,
    )
    # Any new instance ends a sleep: a wake (reason "wake"), a load, a restart.
    return put_model(state, model.replace(instance=instance, failed=False, asleep_since=None, asleep_n_ctx=None))


# Any: instance fields of several types, checked by evolve against the dataclass.
def _update_instance(state: RouterState, rec: ev.Recorded, instance_id: str, **changes: Any) -> RouterState:
    model = instance_of(state, rec, instance_id)
    if model is None or model.instance is None:
        return state
    return put_model(state, model.replace(instance=evolve(model.instance, **changes)))


@on(ev.InstanceLoading)
def _instance_loading(state: RouterState, rec: ev.Recorded) -> RouterState:
    e = rec.event
    assert isinstance(e, ev.InstanceLoading)
    model = instance_of(state, rec, e.instance_id)
    if model is None or model.instance is None or model.instance.status is not InstanceStatus.STARTING:
        return state
    return _update_instance(
        state,
        rec,
        e.instance_id,
        status=InstanceStatus.LOADING,
        progress_at=rec.recorded_at,
        pid=e.pid,
        pid_started_at=e.pid_started_at,
        endpoint=e.endpoint,
        params={**model.instance.params, **e.params},
    )


@on(ev.LoadingProgress)
def _loading_progress(state: RouterState, rec: ev.Recorded) -> RouterState:
    e = rec.event
    assert isinstance(e, ev.LoadingProgress)
    return _update_instance(state, rec, e.instance_id, progress=e.progress, progress_at=rec.recorded_at)


@on(ev.InstanceReady)
def _instance_ready(state: RouterState, rec: ev.Recorded) -> RouterState:
    e = rec.event
    assert isinstance(e, ev.InstanceReady)
    model = instance_of(state, rec, e.instance_id)
    if model is None or model.instance is None or model.instance.status is InstanceStatus.STOPPING:
        return state
    state = _update_instance(
        state,
        rec,
        e.instance_id,
        status=InstanceStatus.READY,
        pid=e.pid,
        endpoint=e.endpoint,
        progress=1.0,
        load_ms=e.load_ms,
        n_ctx=e.n_ctx,
        n_params=e.n_params,
        architecture=e.architecture,
        model_info=dict(e.model_info),
        ready_at=rec.recorded_at,
        offload=Offload.of(e.offload) if e.offload is not None else None,
    )
    ready = state.models[model.name]
    return put_model(state, ready.replace(last_used=rec.recorded_at, last_error=None, crash_count=0))


@on(ev.InstanceStats)
def _instance_stats(state: RouterState, rec: ev.Recorded) -> RouterState:
    e = rec.event
    assert isinstance(e, ev.InstanceStats)
    stats = EngineStats(
        slots_total=e.slots_total,
        slots_busy=e.slots_busy,
        queue_depth=e.queue_depth,
        prefill_tokens_per_s=e.prefill_tokens_per_s,
        decode_tokens_per_s=e.decode_tokens_per_s,
        requests_finished=e.requests_finished,
        at=rec.recorded_at,
    )
    return _update_instance(state, rec, e.instance_id, stats=stats)


def _end_instance(
    state: RouterState, rec: ev.Recorded, instance_id: str, *, failed: bool, error: Failure | None
) -> RouterState:
    model = instance_of(state, rec, instance_id)
    if model is None:
        return state
    changes: dict[str, Any] = {"instance": None, "failed": failed}  # Any: model fields for replace()
    if error is not None:
        changes["last_error"] = error
    return put_model(state, model.replace(**changes))


@on(ev.InstanceLoadFailed)
def _load_failed(state: RouterState, rec: ev.Recorded) -> RouterState:
    e = rec.event
    assert isinstance(e, ev.InstanceLoadFailed)
    error = failure(FailureKind.LOAD, e.reason, e.message, rec.recorded_at)
    return _end_instance(state, rec, e.instance_id, failed=True, error=error)


@on(ev.InstanceStopRequested)
def _stop_requested(state: RouterState, rec: ev.Recorded) -> RouterState:
    e = rec.event
    assert isinstance(e, ev.InstanceStopRequested)
    return _update_instance(state, rec, e.instance_id, status=InstanceStatus.STOPPING, stop_reason=e.reason)


@on(ev.InstanceUnresponsive)
def _instance_unresponsive(state: RouterState, rec: ev.Recorded) -> RouterState:
    # ready -> stopping (reason unresponsive); the failure is the model's from now (the 503 its requests get
    # quotes it), and counts as a crash for restart = on-failure's backoff.
    e = rec.event
    assert isinstance(e, ev.InstanceUnresponsive)
    model = instance_of(state, rec, e.instance_id)
    if model is None or model.instance is None:
        return state
    hang = Hang(e.cause, e.silent_s, e.last_step_s, e.steps)
    error = failure(
        FailureKind.CRASH, UNRESPONSIVE, message(hang, e.bound_s, e.requests_waiting), rec.recorded_at, hint=HINT
    )
    inst = evolve(model.instance, status=InstanceStatus.STOPPING, stop_reason=UNRESPONSIVE)
    return put_model(state, model.replace(instance=inst, last_error=error, crash_count=model.crash_count + 1))


@on(ev.InstanceStopped)
@on(ev.InstanceLost)
def _instance_ended(state: RouterState, rec: ev.Recorded) -> RouterState:
    # Stopped as asked, or lost with a previous service: either way not a failure, unless it was stopped
    # for being unresponsive (instance_unresponsive set the error).
    e = rec.event
    assert isinstance(e, (ev.InstanceStopped, ev.InstanceLost))
    model = instance_of(state, rec, e.instance_id)
    hung = isinstance(e, ev.InstanceStopped) and e.reason == UNRESPONSIVE
    state = _end_instance(state, rec, e.instance_id, failed=hung, error=None)
    if model is None or model.instance is None or not isinstance(e, ev.InstanceStopped) or e.reason != SLEEP:
        return state
    # Stopped for sleep: the model sleeps until a request wakes it (a new instance, reason "wake").
    slept = state.models[model.name].replace(asleep_since=rec.recorded_at, asleep_n_ctx=model.instance.n_ctx)
    return put_model(state, slept)


@on(ev.SleepEnded)
def _sleep_ended(state: RouterState, rec: ev.Recorded) -> RouterState:
    model = model_of(state, rec)
    return state if model is None else put_model(state, model.replace(asleep_since=None, asleep_n_ctx=None))


@on(ev.InstanceCrashed)
def _instance_crashed(state: RouterState, rec: ev.Recorded) -> RouterState:
    e = rec.event
    assert isinstance(e, ev.InstanceCrashed)
    model = instance_of(state, rec, e.instance_id)
    if model is None or model.instance is None:
        return state
    inst = model.instance
    first = inst.status is InstanceStatus.READY and inst.requests_done == 0 and e.requests_in_flight > 0
    why = explain_exit(
        e.exit_code, e.signal, max_rss_bytes=e.max_rss_bytes, oom_killed=e.oom_killed, first_request=first
    )
    error = failure(
        FailureKind.CRASH,
        "crashed",
        why.message,
        rec.recorded_at,
        exit_code=e.exit_code,
        signal=e.signal,
        signal_name=why.reason if e.signal is not None else None,
        status_code=why.exit_code,
        hint=why.hint,
        first_request=first,
        max_rss_bytes=e.max_rss_bytes,
        stderr_tail=e.stderr_tail,
    )
    return put_model(
        state,
        model.replace(
            instance=None,
            failed=True,
            last_error=error,
            crash_count=model.crash_count + 1,
            first_request_crashes=model.first_request_crashes + 1 if first else model.first_request_crashes,
        ),
    )


# Read by monitors from the worker's HTTP thread: they say nothing about whether its engine survives a
# request, and are no use of the model either (a scrape keeps no model awake nor from eviction: llama-server's
# metrics task does not reset its idle timer).
PROBE_ROUTES = frozenset({"/slots", "/metrics", "/props", "/health", "/v1/health", "/models", "/v1/models"})


@on(ev.RequestCompleted)
def _request_completed(state: RouterState, rec: ev.Recorded) -> RouterState:
    e = rec.event
    assert isinstance(e, ev.RequestCompleted)
    model = model_of(state, rec)
    if model is None:
        return state
    if e.route in PROBE_ROUTES:
        return state
    inst, crashes = model.instance, model.first_request_crashes
    if inst is not None and inst.instance_id == e.instance_id:
        inst = evolve(inst, requests_done=inst.requests_done + 1)
        if e.keep_alive is not None:
            inst = evolve(inst, keep_alive=e.keep_alive)
        if e.status_code < 500:
            crashes = 0  # a live worker answered: it survived a first request, the crash loop is over
    return put_model(state, model.replace(last_used=rec.recorded_at, instance=inst, first_request_crashes=crashes))
