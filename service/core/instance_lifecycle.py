"""The inference instance lifecycle: its transitions, and the decisions on it.

    [*] --instance_requested--> starting --instance_loading--> loading
    starting/loading --instance_ready--> ready
    starting/loading/ready --instance_stop_requested--> stopping
    ready --instance_unresponsive--> stopping (reason unresponsive: a hung worker, killed)
    any live --instance_stopped | instance_crashed | instance_lost--> [*]
    starting/loading/stopping --instance_load_failed--> [*]

Who records what: the service records ``instance_requested`` (a decision),
``instance_stop_requested`` (a decision), ``instance_load_failed`` for a load
deadline or a failed spawn, and, once it has reaped the process, the end it
observed (``instance_stopped`` or ``instance_crashed``) unless the worker
recorded its own end first. The worker records ``instance_loading``,
``loading_progress``, ``instance_ready``, ``instance_load_failed`` and
``instance_stopped``. Start-up recovery records ``instance_lost``.

Sleep (llama-server's ``--sleep-idle-seconds``) is this same lifecycle with
reasons, not a state of its own: an idle ready instance is stopped with reason
``sleep`` (``ready --instance_stop_requested(sleep)--> stopping
--instance_stopped(sleep)--> [*]``), which leaves its *model* asleep
(``ModelState.asleep_since``, status ``sleeping``); the next request starts a
new instance with reason ``wake``, whatever autoload says (``[*]
--instance_requested(wake)--> starting``), and any new instance ends the sleep.
An unload of a sleeping model records ``sleep_ended``. Why stop rather than
keep an idle process: llama-server frees the model and its context and keeps
only its HTTP front; here the front is the router, so the worker has nothing
left to keep, a sleeping model holds no slot, and a sleep survives a kill -9
of the service (no process to recover, the log says it sleeps).

Decision functions take the fold and the facts the fold cannot know (how the
process ended, the time) and return the events to append. No I/O, no clock.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import service.core.events as ev
from service.core.backoff import retry_delay
from service.core.errors import CommandRejected
from service.core.launch import Params
from service.core.processes import ProcessExit
from service.core.state import FailureKind, Instance, InstanceStatus, ModelState, RouterState
from service.core.transitions import Lifecycle, edges

_S, _L, _R, _X = InstanceStatus.STARTING, InstanceStatus.LOADING, InstanceStatus.READY, InstanceStatus.STOPPING
_LIVE = (_S, _L, _R, _X)

INSTANCE_LIFECYCLE = Lifecycle(
    name="instance",
    table=edges(
        [
            ((None,), "instance_requested", _S),
            ((_S,), "instance_loading", _L),
            ((_X,), "instance_loading", "same"),  # stop asked before the worker reported
            ((_S, _L, _X), "loading_progress", "same"),
            ((_S, _L), "instance_ready", _R),
            ((_X,), "instance_ready", "same"),  # became ready as a stop was asked: the stop wins
            ((_R, _X), "instance_stats", "same"),
            ((_S, _L, _R), "instance_stop_requested", _X),
            ((_R,), "instance_unresponsive", _X),  # given up as hung (service.core.liveness)
            ((_S, _L, _X), "instance_load_failed", None),
            ((*_LIVE,), "instance_stopped", None),
            ((*_LIVE,), "instance_crashed", None),
            ((*_LIVE,), "instance_lost", None),
        ]
    ),
    # A worker killed by the service (load deadline, stop timeout) may have
    # appended one more progress or readiness event on its way out.
    late=frozenset(
        {(None, "instance_loading"), (None, "loading_progress"), (None, "instance_ready"), (None, "instance_stats")}
    ),
)

SLEEP = "sleep"
"""The stop reason of a model that goes to sleep (``instance_stop_requested``, ``instance_stopped``)."""
WAKE = "wake"
"""The ``instance_requested`` reason of a request that wakes a sleeping model."""

MAX_RESTARTS = 5
"""Crashes in a row (without a successful ready in between) after which
``restart = on-failure`` gives up, as Supervisor's ``startretries``."""


CRASH_LOOP = 2
"""Crashes on a first request in a row after which a model is no longer loaded on demand: a build
for another CPU crashes every time, and a third autoload would only crash again."""


def crash_loop(model: ModelState) -> CommandRejected | None:
    """Why an autoload of ``model`` is refused, or None. An explicit load (``POST /models/load``)
    and ``restart = on-failure`` (with its backoff) still start it: the user asked, or the policy did."""
    error = model.last_error
    if model.first_request_crashes < CRASH_LOOP or error is None:
        return None
    return CommandRejected(
        "model_failed",
        f"model {model.name!r} crashed on its first request {model.first_request_crashes} times in a row, "
        f"so it is not loaded on demand again: {error.message}. Hint: {error.hint}. "
        "POST /models/load starts it anyway.",
        model=model.name,
        reason="crash_loop",
        signal=error.signal_name,
        exit_code=error.status_code,
        hint=error.hint,
    )


STDERR_LINES = 12
"""Lines of a crashed worker's stderr shown with its reason (the event keeps 8 KiB)."""


def stderr_lines(tail: str, n: int = STDERR_LINES) -> list[str]:
    """The last ``n`` non-empty lines of a stderr tail."""
    return [line for line in tail.splitlines() if line.strip()][-n:]


def crash_rejection(model: ModelState, *, prefix: str = "") -> CommandRejected | None:
    """The answer for a request whose worker crashed under it (or for the request that waited for
    a load that crashed): the reason in words, the hint, and the last lines of its stderr."""
    error = model.last_error
    if model.instance is not None or not model.failed or error is None or error.kind is not FailureKind.CRASH:
        return None
    return CommandRejected(
        "model_failed",
        f"{prefix}model {model.name!r}: {error.message}. Hint: {error.hint}",
        model=model.name,
        reason=error.reason,
        signal=error.signal_name,
        exit_code=error.status_code,
        hint=error.hint,
        stderr_tail=stderr_lines(error.stderr_tail),
    )


def current_instance(state: RouterState, model: str, instance_id: str) -> Instance | None:
    """The model's instance if it is still ``instance_id`` (None once it ended or was replaced)."""
    found = state.models.get(model)
    inst = found.instance if found is not None else None
    return inst if inst is not None and inst.instance_id == instance_id else None


def find_instance(state: RouterState, instance_id: str) -> tuple[str, Instance] | None:
    """``(model, instance)`` of the live instance ``instance_id``, wherever it is."""
    for model in state.models.values():
        if model.instance is not None and model.instance.instance_id == instance_id:
            return model.name, model.instance
    return None


def on_process_exit(
    state: RouterState, model: str, instance_id: str, exit: ProcessExit, in_flight: int = 0
) -> list[ev.Event]:
    """The end to record once the worker process has been reaped.

    Nothing when the worker recorded its own end (stopped, load failed) or
    the instance was already closed; ``instance_stopped`` when a stop had been
    asked for (STOPPING -> ended); otherwise it is a crash (LOADING/READY ->
    ended), an exit nobody asked for. ``in_flight``: the requests being
    proxied to it then (a crash on a first request is told apart by the fold)."""
    inst = current_instance(state, model, instance_id)
    if inst is None:
        return []
    code = exit.exit_code if exit.exit_code is not None else -(exit.signal or 0)
    if inst.status is InstanceStatus.STOPPING:
        return [
            ev.InstanceStopped(
                instance_id=instance_id, reason=inst.stop_reason or "unload", exit_code=code, forced=exit.forced
            )
        ]
    return [
        ev.InstanceCrashed(
            instance_id=instance_id,
            exit_code=exit.exit_code,
            signal=exit.signal,
            stderr_tail=exit.stderr_tail,
            max_rss_bytes=exit.max_rss_bytes,
            oom_killed=exit.oom_killed,
            requests_in_flight=in_flight,
        )
    ]


def load_deadline(inst: Instance, timeout: float) -> datetime | None:
    """When a starting/loading instance times out: ``timeout`` after the last sign of
    life (request, ``instance_loading`` or progress). None once it is ready or stopping."""
    if inst.status not in (InstanceStatus.STARTING, InstanceStatus.LOADING) or timeout <= 0:
        return None
    last = inst.progress_at or inst.requested_at
    if last is None:
        return None
    return last + timedelta(seconds=timeout)


def on_load_deadline(state: RouterState, model: str, instance_id: str, now: datetime, timeout: float) -> list[ev.Event]:
    """STARTING/LOADING -> failed(load_timeout) when no sign of life for ``timeout`` s."""
    inst = current_instance(state, model, instance_id)
    if inst is None:
        return []
    deadline = load_deadline(inst, timeout)
    if deadline is None or now < deadline:
        return []
    return [
        ev.InstanceLoadFailed(instance_id=instance_id, reason="load_timeout", message=f"not ready within {timeout:g} s")
    ]


def restart_delay(model: ModelState, jitter: float) -> float | None:
    """Seconds until ``restart = on-failure`` reloads a crashed model, or None:
    no restart policy, the model is running again, or the backoff ran out
    (``MAX_RESTARTS`` crashes in a row, or crashes on first requests in a row)."""
    if model.config.restart != "on-failure" or model.instance is not None or not model.available:
        return None
    # A worker that gets ready and then dies on each first request is a crash loop too: a ready in
    # between resets crash_count, not first_request_crashes, so the backoff still grows.
    crashes = max(model.crash_count, model.first_request_crashes)
    if crashes < 1 or crashes > MAX_RESTARTS:
        return None
    return retry_delay(crashes, base=1.0, cap=60.0, jitter=jitter)


def request(
    instance_id: str,
    port: int,
    model: ModelState,
    reason: str,
    node: str | None = None,
    params: Params | None = None,
) -> ev.InstanceRequested:
    """``[*] -> starting``: the event that takes a slot for ``model`` (on ``node``, in a cluster), its
    worker launched with ``params`` (by default the model's)."""
    params = dict(model.config.params if params is None else params)
    return ev.InstanceRequested(instance_id=instance_id, reason=reason, port=port, params=params, node=node)


def stop(inst: Instance, reason: str) -> list[ev.Event]:
    """``starting/loading/ready -> stopping``; nothing when it is already stopping."""
    if inst.status is InstanceStatus.STOPPING:
        return []
    return [ev.InstanceStopRequested(instance_id=inst.instance_id, reason=reason)]


def reconcile(state: RouterState, killed: frozenset[str] = frozenset()) -> list[tuple[str, ev.Event]]:
    """Start-up: every live instance of the previous run is lost (its worker died
    with the service, or was killed by recovery: ``killed`` instance ids)."""
    return [
        (
            m.name,
            ev.InstanceLost(
                instance_id=m.instance.instance_id,
                reason="router_restart",
                killed_survivor=m.instance.instance_id in killed,
            ),
        )
        for m in state.models.values()
        if m.instance is not None
    ]
