"""The hang watch of this node's ready workers: heartbeats in, the core's hang decision, a hung
worker's requests cut.

Each planning pass (:meth:`HangWatch.check`, under the supervisor's lock) hands the ready workers to
:class:`~service.supervision.heartbeats.Heartbeats` and runs
:func:`~service.core.instance_hangs.decide_liveness` over their beats through the interpreter; a
worker given up as hung gets ``instance_unresponsive``, then the decision's effects: its requests
cut at once (:class:`~service.supervision.leases.Leases`, performed here) and its stop (performed
by the supervisor, as every stop).
"""

from __future__ import annotations

from collections.abc import Callable

import httpx
import structlog

from service.core import instance_decisions as decide
from service.core.instance_hangs import CutRequests, decide_liveness, watched
from service.event_store.live_state import LiveState
from service.settings import Settings
from service.supervision.heartbeats import Heartbeats
from service.supervision.interpreter import Interpreter
from service.supervision.leases import Leases
from service.supervision.surroundings import Clock, Probe

_log = structlog.get_logger(__name__)


class HangWatch:
    """The leases in flight to this node's workers, their heartbeats, and the check that acts on a hang."""

    def __init__(
        self,
        settings: Settings,
        live: LiveState,
        interpreter: Interpreter,
        facts: Callable[[], decide.Facts],
        clock: Clock,
        probe: Probe | None = None,
        auth: httpx.Auth | None = None,
    ) -> None:
        self.leases = Leases()
        self.heartbeats = Heartbeats(clock, probe, auth)
        self._settings = settings
        self._live = live
        self._interpreter = interpreter
        self._facts = facts
        interpreter.register(CutRequests, self._cut)

    async def check(self) -> None:
        """Watch the ready workers of this node, and give up those the core calls hung."""
        bound = self._settings.hang_timeout
        self.heartbeats.watch(watched(self._live.state, self._settings.node, bound), self.leases.busy())
        beats = self.heartbeats.beats
        await self._interpreter.apply(lambda s: decide_liveness(s, beats, self._facts(), bound))

    def _cut(self, effect: CutRequests) -> None:
        cut = self.leases.cut(effect.endpoint)
        _log.warning("instance_unresponsive", model=effect.model, endpoint=effect.endpoint, requests_cut=cut)

    async def close(self) -> None:
        """Stop asking (shut-down)."""
        await self.heartbeats.close()
