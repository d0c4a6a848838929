"""The engine thread's progress, as the service's heartbeat reads it (``GET /engine/heartbeat``).

The engine thread calls :meth:`StepClock.begin` before each step and :meth:`StepClock.end` after
it; the HTTP thread reads :meth:`StepClock.beat`. Plain attributes, no lock: each write is one
store under the GIL, and a reader that sees a step count one behind loses nothing (the service
compares counts across heartbeats, a second apart). ``llama_decode`` runs without the GIL, so the
HTTP thread answers while a long step lasts; the service then sees ``step_s`` grow instead of
``steps`` (:mod:`service.core.liveness`).
"""

from __future__ import annotations

import time

from workers.inference.engine._views import Heartbeat


class StepClock:
    """Steps done, when the one in progress began, and the longest one so far."""

    def __init__(self) -> None:
        self.steps = 0
        self._since: float | None = None  # monotonic start of the step in progress; None: idle
        self.slowest_s = 0.0

    def begin(self) -> None:
        """A step starts (engine thread)."""
        self._since = time.monotonic()

    def end(self) -> None:
        """The step in progress ended, well or not (engine thread)."""
        since = self._since
        if since is not None:
            self.slowest_s = max(self.slowest_s, time.monotonic() - since)
        self.steps += 1
        self._since = None

    def beat(self, waiting: int) -> Heartbeat:
        """The heartbeat's answer: ``steps``, ``step_s`` (how long the step in progress has run, None
        when idle), ``slowest_s`` (the longest step so far) and ``waiting`` (requests queued or running)."""
        since = self._since
        step_s = None if since is None else round(time.monotonic() - since, 3)
        return {"steps": self.steps, "step_s": step_s, "slowest_s": round(self.slowest_s, 3), "waiting": waiting}
