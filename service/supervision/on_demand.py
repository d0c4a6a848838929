"""Models whose files come on first use: a preset's ``hf-repo``, or the ``-hf`` model.

llama.cpp's router lists such a preset model but downloads it silently inside
the child on first load (llama.cpp #24822, #19351). Here the first load or
request starts a regular download job, with its progress and events, and
waits for it; a failed download fails the load with its reason.

:class:`OnDemandInstances` wraps the instance supervisor's public entry points
(``load``, ``lease``, ``load_on_startup``) and leaves its decisions alone: once
the files are there, the model is an ordinary model.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import structlog

from service.core.errors import CommandRejected
from service.core.state import ModelState
from service.downloads.resolution import ResolutionError, resolve
from service.live_state import LiveState
from service.settings import Settings
from service.supervision.downloads import DownloadSupervisor
from service.supervision.effects import Effects
from service.supervision.instances import InstanceSupervisor

_log = structlog.get_logger(__name__)
_POLL_SECONDS = 1.0  # a wait re-checks the state at least this often (changes wake it sooner)


def needs_files(model: ModelState | None) -> bool:
    """A model with a Hub source whose files are not (yet) on disk."""
    return model is not None and model.config.hf_repo is not None and not model.available


class OnDemandInstances(InstanceSupervisor):
    """The instance supervisor, plus a download before the first load of an hf-repo model."""

    def __init__(
        self, settings: Settings, live: LiveState, downloads: DownloadSupervisor, effects: Effects | None = None
    ) -> None:
        super().__init__(settings, live, effects)
        self.downloads = downloads
        self._loads: set[asyncio.Task[Any]] = set()

    async def fetch(self, model: ModelState) -> str | None:
        """Start (or join) the download of ``model``'s hf-repo; returns its job id."""
        if model.active_job is not None:
            return model.active_job
        hf_repo = model.config.hf_repo
        assert hf_repo is not None
        if self.settings.offline:
            raise CommandRejected(
                "model_failed", f"model {model.name!r} is not in the cache and the service is offline", model=model.name
            )
        try:
            resolution = await asyncio.to_thread(
                resolve, hf_repo, endpoint=self.settings.hf_endpoint, token=self.settings.hf_token,
                hf_file=model.config.hf_file,
            )  # fmt: skip
        except ResolutionError as exc:
            _log.warning("on_demand_download_refused", model=model.name, hf_repo=hf_repo, reason=exc.code)
            raise CommandRejected(
                "model_failed", f"cannot download model {model.name!r} from {hf_repo}: {exc.message}",
                model=model.name, reason=exc.code,
            ) from None  # fmt: skip
        job_id, _, _ = await self.downloads.request(model.name, resolution.to_spec())
        return job_id

    async def files_ready(self, name: str) -> ModelState:
        """Wait until ``name`` has its files; a download that ended without them is a ``model_failed``."""
        while True:
            model = self.live.state.models.get(name)
            if model is None:
                raise CommandRejected("model_not_found", f"model {name!r} is not found", model=name)
            if model.available:
                return model
            if model.active_job is None:
                error = model.last_error or {}
                raise CommandRejected(
                    "model_failed",
                    f"model {name!r} could not be downloaded: {error.get('reason', 'cancelled')}: "
                    f"{error.get('message', 'the download ended without the files')}",
                    model=name,
                )
            await self.live.wait_beyond(self.live.position, timeout=_POLL_SECONDS)

    async def _ensure_files(self, name: str) -> None:
        model = self.live.state.resolve(name)
        if needs_files(model):
            assert model is not None
            await self.fetch(model)
            await self.files_ready(model.name)

    @asynccontextmanager
    async def lease(self, name: str, *, autoload: bool) -> AsyncIterator[tuple[str, str]]:
        """As :meth:`InstanceSupervisor.lease`; with ``autoload``, a model without its
        files is downloaded first, and the request waits for it."""
        if autoload:
            await self._ensure_files(name)
        async with super().lease(name, autoload=autoload) as address:
            yield address

    async def load(self, name: str, *, reason: str = "load") -> ModelState:
        """As :meth:`InstanceSupervisor.load`, returning at once; a model without its
        files starts downloading, and loads when the download has finished."""
        model = self.live.state.resolve(name)
        if not needs_files(model):
            return await super().load(name, reason=reason)
        assert model is not None
        await self.fetch(model)
        task = asyncio.ensure_future(self._load_when_ready(model.name, reason))
        self._loads.add(task)
        task.add_done_callback(self._loads.discard)
        return self.live.state.models[model.name]

    async def _load_when_ready(self, name: str, reason: str) -> None:
        try:
            await self.files_ready(name)
            await super().load(name, reason=reason)
        except CommandRejected as exc:
            _log.warning("load_after_download_failed", model=name, code=exc.code, detail=exc.message)

    async def load_on_startup(self) -> list[str]:
        """``load-on-startup`` models, those without files included (downloaded first)."""
        started = []
        for model in list(self.live.state.models.values()):
            if model.config.load_on_startup and needs_files(model) and model.instance is None:
                with contextlib.suppress(CommandRejected):
                    await self.load(model.name, reason="startup")
                    started.append(model.name)
        return started + await super().load_on_startup()

    async def shutdown(self) -> None:
        for task in list(self._loads):
            task.cancel()
        await asyncio.gather(*self._loads, return_exceptions=True)
        await super().shutdown()
