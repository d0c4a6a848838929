"""Models whose files come on first use: a preset's ``hf-repo``, or the ``-hf`` model; and a
pulled model whose files only a lost or departed node held, fetched again as it was pulled; and a
model's draft (``hf-repo-draft``, :mod:`service.core.draft_source`), fetched as a cache model of its own.

llama.cpp's router lists such a preset model but downloads it silently inside
the child on first load (llama.cpp #24822, #19351). Here the core decides
(``instance_decisions.decide_fetch``) that the first load or request fetches
the files first, and :class:`OnDemandFiles` performs that effect: it starts a
regular download job, with its progress and events, and the load or request
waits for it; a failed download fails the load with its reason. Once the files
are there, the model is an ordinary model. In a cluster the job goes to the
node that will serve the model (``download_requested`` with ``node``, decided
by the instance supervisor's placement), whose supervisor runs it into its own
cache; the request waits here for the files, then for the model to be ready
there, and is forwarded.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import structlog

from service.core.contracts import DownloadSpec
from service.core.draft_source import draft_refusal, draft_source, needs_draft
from service.core.errors import CommandRejected
from service.core.holders import held_live
from service.core.instance_decisions import FetchFiles
from service.core.scheduling import SlotFacts, download_node, needs_own_files, pulled_from
from service.core.state import JobStatus, ModelState, RouterState
from service.downloads.resolution import ResolutionError, resolve, worker_spec
from service.event_store.live_state import LiveState
from service.settings import Settings
from service.supervision.downloads import DownloadSupervisor

_log = structlog.get_logger(__name__)
_POLL_SECONDS = 1.0  # a wait re-checks the state at least this often (changes wake it sooner)
Load = Callable[..., Awaitable[Any]]
Slots = Callable[[RouterState], SlotFacts]
"""What placement needs beyond the fold (requests in flight, every node's budget), for a state."""

__all__ = ["FetchFiles", "OnDemandFiles"]


class OnDemandFiles:
    """Performs :class:`FetchFiles`: a download job for a model's hf-repo, then (maybe) its load."""

    def __init__(self, settings: Settings, live: LiveState, downloads: DownloadSupervisor) -> None:
        self.settings = settings
        self.live = live
        self.downloads = downloads
        self._loads: set[asyncio.Task[Any]] = set()
        self._drafts: dict[str, str] = {}  # model -> the name its hf-repo-draft resolved to

    async def fetch(self, effect: FetchFiles, load: Load, slots: Slots | None = None) -> str | None:
        """Start (or join) the download; returns its job id. With ``then_load``, ``load`` the model
        in the background once its files are there. ``slots``: what placement needs beyond a state, to
        pick the node that downloads it (in a cluster, the one that will serve it). Refusals
        (offline, not on the Hub) raise."""
        state = self.live.state
        model = state.models[effect.model]
        draft_only = needs_draft(state, model) and not needs_own_files(model, state)
        job_id = None if draft_only else await self._request(model, slots)
        if needs_draft(state, model):
            job_id = await self._request_draft(model, slots) or job_id
        if effect.then_load is not None:
            task = asyncio.ensure_future(self._load_when_ready(model.name, effect.then_load, load))
            self._loads.add(task)
            task.add_done_callback(self._loads.discard)
        return job_id

    async def _request(self, model: ModelState, slots: Slots | None) -> str | None:
        if model.active_job is not None:
            return model.active_job
        if self.settings.offline:
            raise CommandRejected(
                "model_failed", f"model {model.name!r} is not in the cache and the service is offline", model=model.name
            )
        spec = await self._spec(model)

        def site(state: RouterState) -> str | None:  # decided on the state the request lands on
            return None if slots is None else download_node(state, model.name, spec.total_bytes, slots(state))

        job_id, _, _ = await self.downloads.request(model.name, spec, site)
        return job_id

    async def _request_draft(self, model: ModelState, slots: Slots | None) -> str | None:
        """The download of ``model``'s ``hf-repo-draft``, as its own cache model (the name the Hub
        resolves it to), on the node that will serve ``model``."""
        source = draft_source(model)
        assert source is not None
        what = f"the draft model of {model.name!r} (hf-repo-draft = {source.text})"
        if self.settings.offline:
            raise CommandRejected(
                "model_failed", f"{what} is not in the cache and the service is offline", model=model.name
            )
        try:
            resolution = await asyncio.to_thread(
                resolve,
                source.text,
                endpoint=self.settings.hf_endpoint,
                token=self.settings.hf_token,
                hf_file=source.hf_file,
            )
        except ResolutionError as exc:
            _log.warning("on_demand_draft_refused", model=model.name, hf_repo_draft=source.text, reason=exc.code)
            raise draft_refusal(what, model.name, exc.code, exc.status, exc.message) from None
        self._drafts[model.name] = resolution.canonical_name
        spec = resolution.to_spec()

        def site(state: RouterState) -> str | None:  # beside the model it drafts for
            return None if slots is None else download_node(state, model.name, spec.total_bytes, slots(state))

        job_id, _, _ = await self.downloads.request(resolution.canonical_name, spec, site)
        return job_id

    async def _spec(self, model: ModelState) -> DownloadSpec:
        """What to fetch: a pulled model's files again, as its finished job pinned them (commit and
        sha256s: nothing to ask the Hub first), else its ``hf-repo`` resolved on the Hub now."""
        hf_repo = model.config.hf_repo
        pulled = pulled_from(model) if hf_repo is None else None
        if pulled is not None:
            endpoint = self.settings.hf_endpoint
            return worker_spec(pulled.repo, pulled.revision, pulled.commit, pulled.quant, endpoint, pulled.files)
        assert hf_repo is not None
        try:
            resolution = await asyncio.to_thread(
                resolve,
                hf_repo,
                endpoint=self.settings.hf_endpoint,
                token=self.settings.hf_token,
                hf_file=model.config.hf_file,
            )
        except ResolutionError as exc:
            _log.warning("on_demand_download_refused", model=model.name, hf_repo=hf_repo, reason=exc.code)
            raise CommandRejected(
                "model_failed",
                f"cannot download model {model.name!r} from {hf_repo}: {exc.message}",
                model=model.name,
                reason=exc.code,
            ) from None
        return resolution.to_spec()

    async def ready(self, name: str) -> ModelState:
        """Wait until ``name`` has its files; a download that ended without them is a ``model_failed``."""
        while True:
            state = self.live.state
            model = state.models.get(name)
            if model is None:
                raise CommandRejected("model_not_found", f"model {name!r} is not found", model=name)
            here = model.available and held_live(state, model)
            if here and not needs_draft(state, model):
                return model
            if here:
                self._raise_if_draft_ended(state, model)
            elif model.active_job is None:
                error = model.last_error
                last = state.job(model.last_job) if model.last_job is not None else None
                reason = error.reason if error is not None else "cancelled"
                message = error.message if error is not None else "the download ended without the files"
                if error is None and last is not None and last.status is JobStatus.INTERRUPTED:
                    where = f" with node {last.node!r}" if last.node is not None else ""
                    reason, message = "interrupted", f"the download stopped{where}; it resumes when that node is back"
                raise CommandRejected(
                    "model_failed", f"model {name!r} could not be downloaded: {reason}: {message}", model=name
                )
            await self.live.wait_beyond(self.live.position, timeout=_POLL_SECONDS)

    def _raise_if_draft_ended(self, state: RouterState, model: ModelState) -> None:
        """The draft's download ended without its files (or never started): the load cannot run."""
        name = self._drafts.get(model.name)
        draft = state.models.get(name) if name is not None else None
        if draft is not None and draft.active_job is not None:
            return
        error = draft.last_error if draft is not None else None
        why = f"{error.reason}: {error.message}" if error is not None else "the download ended without the files"
        message = f"the draft model {name or ''!r} of model {model.name!r} could not be downloaded: {why}"
        raise CommandRejected("model_failed", message, model=model.name)

    async def _load_when_ready(self, name: str, reason: str, load: Load) -> None:
        try:
            await self.ready(name)
            await load(name, reason=reason)
        except CommandRejected as exc:
            _log.warning("load_after_download_failed", model=name, code=exc.code, detail=exc.message)

    async def close(self) -> None:
        """Cancel loads still waiting for their files (shut-down)."""
        for task in list(self._loads):
            task.cancel()
        await asyncio.gather(*self._loads, return_exceptions=True)
