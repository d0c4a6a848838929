"""``DELETE /models``: stop what runs, then delete the files, then record it.

Order matters (issue 11 §1.2): the model is held first, so no autoload can
start it again while it is being removed; a running download is cancelled
(partials discarded) and a running instance stopped and reaped; only then
are the files deleted and ``model_removed`` recorded. Concurrent removals
of one model run one after the other; the second finds it gone (404).
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from pathlib import Path

from service.core import events as ev
from service.core.decision import Append
from service.core.errors import CommandRejected
from service.core.removal_plan import RemovalPlan, plan_removal
from service.core.state import RouterState
from service.downloads.file_deletion import remove_files
from service.event_store.live_state import LiveState
from service.supervision.downloads import DownloadSupervisor
from service.supervision.instances import InstanceSupervisor
from service.supervision.interpreter import Interpreter

STOP_ATTEMPTS = 3


@dataclass(frozen=True, slots=True)
class Removed:
    model: str
    files: tuple[str, ...]
    bytes_freed: int
    kept_blobs: tuple[str, ...]
    state: RouterState


class ModelRemover:
    """Removes downloaded models, one removal per model at a time."""

    def __init__(
        self,
        live: LiveState,
        interpreter: Interpreter,
        instances: InstanceSupervisor,
        downloads: DownloadSupervisor,
        cache_dir: Path,
    ) -> None:
        self.live = live
        self.interpreter = interpreter
        self.instances = instances
        self.downloads = downloads
        self.cache_dir = cache_dir
        self._locks: dict[str, asyncio.Lock] = {}

    async def remove(self, name: str, *, force: bool) -> Removed:
        """Remove ``name`` (or alias); raises ``CommandRejected`` (404, 409) when it cannot."""
        plan = plan_removal(self.live.state, name, force=force)
        lock = self._locks.setdefault(plan.model, asyncio.Lock())
        async with lock, self.instances.holding(plan.model):
            plan = plan_removal(await self.live.sync(), name, force=force)  # a removal before us may have won
            if plan.cancel_job is not None:
                await self.downloads.cancel(plan.cancel_job, discard=True)
            plan = await self._stopped(name, force=force)
            removal = await asyncio.to_thread(remove_files, self.cache_dir, plan)
            await self.instances.prompt_cache.remove_model(plan.model)  # its saved prompt cache goes with it
            event = ev.ModelRemoved(files=removal.files, bytes_freed=removal.bytes_freed)
            state = await self.interpreter.record([Append(event, plan.model)])  # the files are gone: a fact
        return Removed(plan.model, removal.files, removal.bytes_freed, plan.kept_blobs, state)

    async def _stopped(self, name: str, *, force: bool) -> RemovalPlan:
        """The plan once the model runs nowhere: its instance stopped, and again if one started meanwhile
        (a load decided just before the hold); ``model_removed`` is never recorded beside a live instance."""
        for _ in range(STOP_ATTEMPTS):
            plan = plan_removal(await self.live.sync(), name, force=force)
            if plan.stop_instance is None:
                return plan
            with contextlib.suppress(CommandRejected):  # it may have ended meanwhile
                await self.instances.unload(plan.model, reason="remove")
        plan = plan_removal(await self.live.sync(), name, force=force)
        if plan.stop_instance is not None:
            msg = f"model {plan.model!r} is still running after {STOP_ATTEMPTS} stops; try again"
            raise CommandRejected("conflict", msg, model=plan.model)
        return plan
