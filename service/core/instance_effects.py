"""What the instance decisions ask of the worker processes, and the checks taken while it is done.

A decision (:mod:`service.core.instance_decisions`) asks for a spawn, a stop, a
sleep, a kill or a download first; ``service/supervision/instance_processes.py``
carries them out. Carrying them out takes time (a spawn, a stop's grace), and the
fold moves meanwhile, so what the supervisor does at each step is decided here,
over the state of that moment: whether a requested worker is still to be spawned,
whether one just spawned is killed at once, and how a worker is told to stop.

Pure module: stdlib only.
"""

from __future__ import annotations

from dataclasses import dataclass

import service.core.events as ev
import service.core.instance_lifecycle as lifecycle
from service.core.decision import Effect
from service.core.launch import InferenceLaunch
from service.core.state import InstanceStatus, RouterState

PROMPT_CACHE_SAVE_S = 5.0
"""The bound a worker's prompt-cache save keeps to at a planned stop (issue 35)."""
PROMPT_CACHE_STOP_S = PROMPT_CACHE_SAVE_S + 3.0
"""The least time a saving worker gets between its stop line and SIGKILL: the save's bound plus the
stop of its running requests' streams and its last appends. SIGTERM is a graceful stop for the worker
(it saves then too), so only SIGKILL cuts a save."""
STOP_GRACE_S = 0.2
"""Seconds a worker has to act on its stop line before SIGTERM (a stop timeout shorter than this wins)."""


@dataclass(frozen=True, slots=True)
class Spawn(Effect):
    """Start the inference worker of ``request`` for ``model``."""

    model: str
    request: ev.InstanceRequested


@dataclass(frozen=True, slots=True)
class Stop(Effect):
    """Stop instance ``instance_id``'s worker (stdin line, SIGTERM, SIGKILL after its stop timeout)."""

    instance_id: str


@dataclass(frozen=True, slots=True)
class Sleep(Stop):
    """Put ``model`` to sleep: keep what its worker answers on ``/props`` and ``/metrics`` (served while
    it sleeps, as llama-server serves them from a cache), then stop it as :class:`Stop` does."""

    model: str
    endpoint: str


@dataclass(frozen=True, slots=True)
class Kill(Effect):
    """SIGKILL instance ``instance_id``'s worker at once (nothing to save: a load that timed out)."""

    instance_id: str


@dataclass(frozen=True, slots=True)
class FetchFiles(Effect):
    """Download ``model``'s files first (a regular download job: its hf-repo, or a pulled model's
    files again when only gone nodes held them); with a ``then_load`` reason, load it once they are there."""

    model: str
    then_load: str | None = None


def spawn_wanted(state: RouterState, model: str, instance_id: str) -> bool:
    """Whether the requested worker is still to be spawned: not when its instance was stopped (or
    replaced) before the spawn came round; the stop records its end then."""
    inst = lifecycle.current_instance(state, model, instance_id)
    return inst is not None and inst.status is not InstanceStatus.STOPPING


def kill_spawned(state: RouterState, model: str, instance_id: str) -> bool:
    """Whether the worker just spawned is killed at once: its instance ended while it was spawning
    (its load deadline passed)."""
    return lifecycle.current_instance(state, model, instance_id) is None


@dataclass(frozen=True, slots=True)
class StopOrder:
    """How a worker is told to stop: its stdin ``line`` (which carries the reason into the worker's
    own ``instance_stopped``), then SIGTERM after ``grace`` seconds, SIGKILL after ``timeout``."""

    line: str
    grace: float
    timeout: float


def stop_order(
    state: RouterState, instance_id: str, default_timeout: float, cache_disk_max: int | None = None
) -> StopOrder:
    """The stop of ``instance_id``'s worker: the reason its stop was recorded with (``unload`` when
    none is), and the model's own stop timeout (a preset key, as in llama.cpp), else ``default_timeout``.
    A worker that saves its prompt cache (its launch's ``cache_disk_max``, or the service's
    ``cache_disk_max`` over it, > 0) gets at least :data:`PROMPT_CACHE_STOP_S` before SIGKILL, whatever
    the reason: a save cut off by SIGKILL is a save lost (issue 35)."""
    found = lifecycle.find_instance(state, instance_id)
    reason = found[1].stop_reason if found is not None and found[1].stop_reason else "unload"
    model = state.models.get(found[0]) if found is not None else None
    own = model.config.stop_timeout if model is not None else None
    timeout = default_timeout if own is None else own
    params = found[1].params if found is not None else {}
    budget = cache_disk_max if cache_disk_max is not None else InferenceLaunch.from_params(params).cache_disk_max
    if budget > 0:
        timeout = max(timeout, PROMPT_CACHE_STOP_S)
    return StopOrder(f"stop {reason}", min(STOP_GRACE_S, timeout), timeout)
