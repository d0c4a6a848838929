"""Whether a ready inference worker is alive and making progress: the hang decision.

The supervisor asks every ready worker of its node for a heartbeat each
:data:`HEARTBEAT_S` (``GET /engine/heartbeat``, answered by the worker's HTTP
thread): its engine's step counter and how long the step in progress has run
(:class:`Beat`). A worker is given up as hung (:func:`judge`) when

* it has not answered for longer than the bound, or :data:`ANSWER_S` when
  that is shorter (``no_answer``): a stopped process (SIGSTOP), a swap storm,
  an interpreter that never lets its HTTP thread run; or
* one engine step has lasted longer than the bound (``step_stuck``):
  ``llama_decode`` never returned (a deadlock in a native library, a GPU
  driver fault), while the HTTP thread still answers; or
* requests wait in its engine and no step began for the bound
  (``no_progress``): the engine thread is stuck between steps.

A long prefill is neither. ``llama_decode`` runs without the GIL, so the HTTP
thread answers all along, and the bound applies to one step, which holds at
most ``n_batch`` prompt tokens: the default bound (:data:`DEFAULT_HANG_TIMEOUT`)
is well above the longest step measured on a 2-core machine. Why not "the step
counter must move between heartbeats": one step of a big prompt lasts many
heartbeats, and would be called a hang.

The decision that acts on a hang is :func:`service.core.instance_hangs.decide_liveness`.

Pure module: stdlib only; the monotonic clock is passed in.
"""

from __future__ import annotations

from dataclasses import dataclass

from service.core.errors import CommandRejected
from service.core.state import UNRESPONSIVE, ModelState

HEARTBEAT_S = 1.0
"""Seconds between two heartbeat requests to a ready worker with requests in flight (each one a GET
its HTTP thread answers)."""

IDLE_HEARTBEAT_S = 5.0
"""Seconds between two heartbeat requests to a worker with no request in flight: one a second cost an
idle service with a model loaded ~0.1-0.15 % of a core more (``bench/idle.py``), and an idle worker
has nothing to make progress on. Its silence is still found within :data:`ANSWER_S` (plus this), and
a request to it is asked after within :data:`HEARTBEAT_S`, its silence counted from the last answer."""

DEFAULT_HANG_TIMEOUT = 600.0
"""Seconds one engine step may last before its worker is given up as hung (MODELROUTER_HANG_TIMEOUT,
--hang-timeout, the preset's ``hang-timeout``). Measured on a 2-core VM (docs/operations.md, "A hung
worker"): one prefill step runs at 50-64 GFLOP/s there, so a full 2048-token step of a 1B model takes
about 100 s and of a 7-8B one several minutes. 600 s is llama-server's ``--timeout``: a step longer
than that gets no byte to its client within the proxied hop's read timeout anyway."""

ANSWER_S = 30.0
"""Seconds of heartbeat silence after which a worker is hung whatever its step bound (a lower bound wins):
its HTTP thread answers within milliseconds, during a long step too (``llama_decode`` runs without the
GIL), so 30 s of silence is a stopped or starved process, not a long prompt."""


@dataclass(frozen=True, slots=True)
class Beat:
    """What the supervisor last saw of one worker, in monotonic seconds."""

    seen_at: float
    """When it last answered (or, before its first answer, when it was first watched)."""
    steps: int = 0
    """Its engine's step counter at that answer."""
    step_s: float | None = None
    """How long the step in progress had run at that answer; None: the engine was idle."""
    moved_at: float = 0.0
    """When the step counter was last seen to change, or work was first seen after none (or the worker
    first watched): progress is owed from then."""
    waiting: int = 0
    """Requests queued or running in its engine at that answer."""


def first_beat(now: float) -> Beat:
    """The beat of a worker just watched: its bound runs from now."""
    return Beat(seen_at=now, moved_at=now)


def heard(last: Beat | None, now: float, steps: int, step_s: float | None, waiting: int = 0) -> Beat:
    """The beat after an answer at ``now``."""
    moved = last is None or steps != last.steps or (waiting > 0 and last.waiting == 0)
    since = now if moved or last is None else last.moved_at
    return Beat(seen_at=now, steps=steps, step_s=step_s, moved_at=since, waiting=waiting)


@dataclass(frozen=True, slots=True)
class Hang:
    """Why a worker is given up: the cause, and what was seen."""

    cause: str  # "no_answer" | "step_stuck" | "no_progress"
    silent_s: float
    last_step_s: float
    steps: int


def judge(beat: Beat, now: float, bound: float) -> Hang | None:
    """A hang, or None while the worker answers (within ``bound``, at most :data:`ANSWER_S`), its step in
    progress is younger than ``bound``, and work waiting starts a step within ``bound`` (0: never judged)."""
    if bound <= 0:
        return None
    silent = now - beat.seen_at
    seen = Hang("no_answer", round(silent, 1), round(now - beat.moved_at, 1), beat.steps)
    if silent > min(bound, ANSWER_S):
        return seen
    if beat.step_s is not None and beat.step_s + silent > bound:
        return Hang("step_stuck", seen.silent_s, seen.last_step_s, beat.steps)
    if beat.step_s is None and beat.waiting > 0 and now - beat.moved_at > bound:
        return Hang("no_progress", seen.silent_s, seen.last_step_s, beat.steps)  # work, and no step begins
    return None


def bound_for(model: ModelState, default: float) -> float:
    """The model's own ``hang-timeout`` (a preset key), else the global one."""
    return default if model.config.hang_timeout is None else model.config.hang_timeout


def message(hang: Hang, bound: float, waiting: int) -> str:
    """The sentence a person reads (``last_error.message`` and the 503 of the requests it held)."""
    if hang.cause == "no_answer":
        seen = f"it did not answer its heartbeat for {hang.silent_s:g} s"
    elif hang.cause == "step_stuck":
        seen = f"one engine step has run for over {bound:g} s while its HTTP thread still answers"
    else:
        seen = f"its engine began no step for {hang.last_step_s:g} s with requests waiting"
    return (
        f"inference worker stopped responding: {seen} (hang timeout {bound:g} s; step {hang.steps}, the last one "
        f"{hang.last_step_s:g} s ago; {waiting} request(s) waiting); it was killed"
    )


HINT = (
    "a stopped process (SIGSTOP, a debugger), a swap storm, or a deadlock or driver fault in llama.cpp; "
    "if a single step of a long prompt legitimately takes longer, raise hang-timeout (MODELROUTER_HANG_TIMEOUT "
    "or the model's preset key) or lower -b"
)


def unresponsive_rejection(model: ModelState) -> CommandRejected | None:
    """The answer for a request whose worker was given up as hung (503 ``model_failed``, reason
    ``unresponsive``), from the failure ``instance_unresponsive`` recorded; None for another failure."""
    error = model.last_error
    if error is None or error.reason != UNRESPONSIVE:
        return None
    return CommandRejected(
        "model_failed",
        f"model {model.name!r}: {error.message}. Hint: {error.hint}",
        model=model.name,
        reason=UNRESPONSIVE,
        hint=error.hint,
    )
