"""The service's side of the prompt cache on disk (issue 35): the total budget across models, and a
removed model's files. Which files go is decided in :mod:`service.core.prompt_cache`; here they are
deleted, then recorded (``prompt_cache_discarded``): a deleted file is a fact, as ``model_removed``'s.

Each worker keeps its own model under ``--cache-disk-max`` as it saves; only the service sees every
model, so it applies ``--cache-disk-total`` once a worker's saves are in the log (after its exit), and
at start (the saves of the last shutdown's stops, a budget lowered since).
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Sequence
from pathlib import Path

import structlog

from service.core import events as ev
from service.core.decision import Append
from service.core.prompt_cache import Discard, file_path, model_dir_name, over_budget
from service.event_store.live_state import LiveState
from service.event_store.rows import LogDiskFull, StoreUnavailable
from service.settings import Settings
from service.supervision.interpreter import Interpreter
from service.supervision.worker_args import prompt_cache_root

_log = structlog.get_logger(__name__)


class PromptCacheFiles:
    """Deletes saved prompt-cache files for the total budget and for a removed model; one at a time,
    so two exits in a row never delete (and record) the same file twice."""

    def __init__(self, settings: Settings, live: LiveState, interpreter: Interpreter) -> None:
        self.settings = settings
        self.live = live
        self.interpreter = interpreter
        self.root = prompt_cache_root(settings)
        self._lock = asyncio.Lock()

    async def enforce_budget(self) -> list[Discard]:
        """Delete the least recently used files until the total fits ``--cache-disk-total``; the
        discards recorded (reason ``budget``). A store that cannot record them leaves the files."""
        async with self._lock:
            chosen = over_budget(await self.live.sync(), self.settings.cache_disk_total)
            if not chosen:
                return []
            appends = [
                Append(ev.PromptCacheDiscarded(file=d.file, reason="budget", bytes=d.bytes), d.model) for d in chosen
            ]
            await asyncio.to_thread(_unlink, self.root, [file_path(self.root, d.model, d.file) for d in chosen])
            try:
                await self.interpreter.record(appends)
            except (LogDiskFull, StoreUnavailable) as exc:  # deleted, not recorded: verify reports them missing
                _log.error("prompt_cache_discards_not_recorded", error=str(exc), files=len(chosen))
            _log.info("prompt_cache_budget", deleted=len(chosen), bytes=sum(d.bytes for d in chosen))
            return chosen

    async def apply_budget(self) -> None:
        """:meth:`enforce_budget`, never raising into its caller (a worker's exit, the start): a file
        that cannot be deleted is logged and stays; the next exit tries again."""
        try:
            await self.enforce_budget()
        except (OSError, LogDiskFull, StoreUnavailable) as exc:
            _log.error("prompt_cache_budget_failed", error=str(exc))

    async def remove_model(self, model: str) -> list[str]:
        """Delete ``model``'s directory (and any recorded file outside it), recording each file the log
        knew as discarded (reason ``model_removed``); before its ``model_removed``, which drops the rest."""
        async with self._lock:
            known = self.live.state.models.get(model)
            entries = list(known.prompt_cache.values()) if known is not None else []
            paths = [file_path(self.root, model, e.file) for e in entries]
            await asyncio.to_thread(_remove_dir, self.root, Path(self.root / model_dir_name(model)), paths)
            if entries:
                await self.interpreter.record(
                    [
                        Append(ev.PromptCacheDiscarded(file=e.file, reason="model_removed", bytes=e.bytes), model)
                        for e in entries
                    ]
                )
            return [e.file for e in entries]


def _unlink(root: Path, paths: Sequence[object]) -> None:
    """Delete ``paths``, those under ``root`` only: a recorded name is never a way out of the cache."""
    for path in paths:
        resolved = Path(str(path)).resolve()
        if resolved.is_relative_to(root.resolve()):
            resolved.unlink(missing_ok=True)


def _remove_dir(root: Path, directory: Path, paths: Sequence[object]) -> None:
    _unlink(root, paths)
    shutil.rmtree(directory, ignore_errors=True)
