"""The models start-up asked to load that have not been ready yet.

Single-model mode's ``/health`` says llama-server's "Loading model" until its
model is loaded. The fold alone cannot tell the start-up load's gap: after a
``-hf`` model's download completes and before its load is requested, the model
is ``unloaded`` with its files here, which is what a model unloaded after
serving looks like too (served: the next request loads it). This remembers
which names the start-up load is still owed, until each one's first
``instance_ready``; :func:`service.core.server_mode.not_serving` takes it as a fact.
"""

from __future__ import annotations

from collections.abc import Iterable

from service.core import events as ev
from service.core.state import ModelStatus, RouterState


class StartupLoads:
    """A LiveState listener: the start-up loads not ready yet (``waiting``)."""

    def __init__(self) -> None:
        self._waiting: set[str] = set()

    @property
    def waiting(self) -> frozenset[str]:
        return frozenset(self._waiting)

    def expect(self, names: Iterable[str], state: RouterState) -> None:
        """Start-up asked to load ``names`` (those already loaded are not waited for)."""
        for name in names:
            model = state.models.get(name)
            if model is None or model.status is not ModelStatus.LOADED:
                self._waiting.add(name)

    def retain(self, names: Iterable[str]) -> None:
        """Only ``names`` are owed (the loads start-up did start)."""
        self._waiting &= set(names)

    def on_event(self, recorded: ev.Recorded, state: RouterState) -> None:
        if recorded.model in self._waiting and isinstance(recorded.event, ev.InstanceReady):
            self._waiting.discard(recorded.model)
