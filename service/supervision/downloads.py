"""Download jobs: the thin driver around ``core.download_lifecycle``.

One ``workers.download`` process per job. The worker records its own start,
progress and outcome; the service records the request, a cancel request, the
outcome of a worker that died without one, and starts queued jobs in request
order as far as ``max_downloads`` allows. The decide -> append step is
serialised by one lock that is never held while waiting for a worker.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import structlog

from service.core import cluster
from service.core import download_lifecycle as lifecycle
from service.core.cache_layout import CachePaths
from service.core.contracts import DownloadSpec
from service.core.processes import ProcessExit
from service.core.state import DownloadJob, JobStatus, RouterState
from service.downloads.cache_files import partial_bytes
from service.downloads.resolution import worker_spec
from service.event_store.live_state import LiveState
from service.settings import Settings
from service.supervision.interpreter import Interpreter
from service.supervision.surroundings import Surroundings
from service.supervision.worker_args import download_argv, store_env
from service.supervision.worker_pool import WorkerPool

_log = structlog.get_logger(__name__)
Site = Callable[[RouterState], str | None]
"""The node a new download job goes to, decided on the state its request is decided on."""
CANCEL_GRACE_SECONDS = 1.5  # then SIGKILL: a cancel takes effect within 2 s


class DownloadSupervisor:
    """Owns the download worker processes of this service instance."""

    def __init__(
        self,
        settings: Settings,
        live: LiveState,
        surroundings: Surroundings | None = None,
        *,
        interpreter: Interpreter | None = None,
    ) -> None:
        self.settings = settings
        self.live = live
        self.fx = surroundings or Surroundings()
        self._pool = WorkerPool(self.fx.spawn, self._on_exit)
        self._specs: dict[str, DownloadSpec] = {}  # job id -> worker spec, until its worker starts
        self._lock = asyncio.Lock()
        self._shutting_down = False
        self.interpreter = interpreter or Interpreter(live)
        self.interpreter.register(lifecycle.SpawnDownload, self._spawn)
        self.interpreter.register(lifecycle.TakePlaced, lambda e: self.take_placed(e.job_id))
        self.interpreter.register(lifecycle.CancelPlaced, lambda e: self.cancel_placed(e.job_id, discard=e.discard))

    async def request(self, model: str, spec: DownloadSpec, site: Site | None = None) -> tuple[str | None, bool, bool]:
        """Start (or join) the download of ``model``; ``site`` picks the node that downloads it from
        the state the request is decided on (another node's supervisor then runs it). Returns
        ``(job_id, joined, already_downloaded)``."""
        async with self._lock:
            applied = await self.interpreter.apply(
                lambda s: lifecycle.request_download(
                    s, model, self.fx.new_job_id(), spec, site(s) if site is not None else None
                )
            )
            answer = applied.answer
            if answer.existing_job is not None:
                return answer.existing_job, True, False
            if answer.already_downloaded:
                return None, False, True
            assert answer.job_id is not None
            self._specs[answer.job_id] = spec
            await self._start_queued_locked()
            return answer.job_id, False, False

    async def resume(self, job: DownloadJob, endpoint: str) -> None:
        """``interrupted -> queued`` for a job the last run left; a worker resumes it
        from the partial files when a download slot is free."""
        async with self._lock:
            self._specs[job.job_id] = worker_spec(job.repo, job.revision, job.commit, job.quant, endpoint, job.files)
            on_disk = self._bytes_on_disk(job)
            await self.interpreter.apply(lambda _s: lifecycle.decide_resume(job, on_disk))
            await self._start_queued_locked()

    async def take_placed(self, job_id: str) -> None:
        """Run a job another node placed here: its worker fetches the files the request resolved (its
        ``download_requested``) into this node's cache, from this node's Hub endpoint."""
        async with self._lock:
            job = self.live.state.job(job_id)
            if job is None or job.status is not JobStatus.QUEUED or job_id in self._pool:
                return  # ended (cancelled) before this node got to it
            self._specs[job_id] = worker_spec(
                job.repo, job.revision, job.commit, job.quant, self.settings.hf_endpoint, job.files
            )
            await self._start_queued_locked()

    async def take_back(self) -> list[str]:
        """After this node was recorded lost while alive: stop the workers of the jobs the log
        interrupted (stdin EOF: they keep their partials and record nothing), then resume those jobs
        as a restart does (unless told not to resume). Returns their job ids."""
        jobs = cluster.interrupted_here(self.live.state, self._pool.active())
        await self._pool.abandon([job.job_id for job in jobs])
        if self.settings.resume_downloads_on_start:
            for job in jobs:
                await self.resume(job, self.settings.hf_endpoint)
        return [job.job_id for job in jobs]

    async def _start_queued_locked(self) -> None:
        applied = await self.interpreter.apply(
            lambda s: lifecycle.decide_starts(s, self._pool.active(), self.settings.max_downloads, self.settings.node)
        )
        await applied.settled()  # spawned in request order, before the next decision

    async def _spawn(self, effect: lifecycle.SpawnDownload) -> None:
        job = self.live.state.job(effect.job_id)
        spec = self._specs.pop(effect.job_id, None)
        if job is None or spec is None:
            return  # queued by an earlier run and not resumed: nothing to fetch with
        # The worker checks the disk reserve again, by the same rule (service/core/disk_budget.py).
        argv = download_argv(self.settings, job.job_id, job.model, spec.with_reserve(self.settings.disk_reserve_bytes))
        try:
            await self._pool.spawn(job.job_id, argv, name=f"download:{job.job_id}", env=_worker_env(self.settings))
        except OSError as exc:
            message = str(exc)
            await self.interpreter.apply(lambda s: lifecycle.decide_spawn_failed(s, job.job_id, message))

    async def _on_exit(self, job_id: str, exit_: ProcessExit) -> None:
        state = await self.live.sync()  # the worker appends its outcome before exiting
        job = state.job(job_id)
        async with self._lock:
            if job is not None:
                if job.discard_requested:
                    self._discard_partials(job)
                on_disk = self._bytes_on_disk(job)
                applied = await self.interpreter.apply(
                    lambda s: lifecycle.decide_worker_exit(
                        s, job_id, exit_, shutting_down=self._shutting_down, bytes_on_disk=on_disk
                    )
                )
                outcome = applied.answer
                if outcome is not None:
                    _log.warning("download_worker_lost", job_id=job_id, outcome=outcome.TYPE, how=exit_.describe())
            if not self._shutting_down:
                await self._start_queued_locked()

    def _paths(self, job: DownloadJob) -> CachePaths:
        return CachePaths(self.settings.cache_dir, job.repo)

    def _bytes_on_disk(self, job: DownloadJob) -> int:
        return partial_bytes(self._paths(job), [f.sha256 or "" for f in job.files])

    def _discard_partials(self, job: DownloadJob) -> None:
        paths = self._paths(job)
        for f in job.files:
            paths.incomplete(f.sha256 or "").unlink(missing_ok=True)

    async def cancel(self, job_id: str, *, discard: bool) -> DownloadJob:
        """Ask the worker to stop over its stdin (``cancel`` keeps partials,
        ``cancel discard`` deletes them); a queued job without a worker is
        cancelled at once. In a cluster, a job another live node runs is cancelled by that node
        (it folds the ``download_cancel_requested``). Returns the job once it has ended."""
        async with self._lock:
            job = lifecycle.active_job(self.live.state, job_id)
            elsewhere = lifecycle.runs_elsewhere(self.live.state, job, self.settings.node)
            has_worker = job_id in self._pool
            if discard and not has_worker and not elsewhere:
                self._discard_partials(job)
            on_disk = job.bytes_done if elsewhere else self._bytes_on_disk(job)
            # Refuses a job that ended meanwhile (409).
            await self.interpreter.apply(
                lambda s: lifecycle.decide_cancel(
                    s, job_id, discard=discard, has_worker=has_worker, bytes_on_disk=on_disk, node=self.settings.node
                )
            )
            self._specs.pop(job_id, None)
        if has_worker:
            await self._stop_cancelled(job_id, discard)
        if elsewhere:  # its node stops the worker (CancelPlaced), which records the end
            await self.live.wait_until(_ended(job_id), CANCEL_GRACE_SECONDS + 5)
        ended = (await self.live.sync()).job(job_id)
        assert ended is not None
        return ended

    async def cancel_placed(self, job_id: str, *, discard: bool) -> None:
        """Carry out a cancel another node recorded for a job of this node: stop its worker, or
        record a job with no worker yet cancelled."""
        async with self._lock:
            job = self.live.state.job(job_id)
            if job is None or not job.status.active:
                return
            has_worker = job_id in self._pool
            if not has_worker:
                if discard:
                    self._discard_partials(job)
                on_disk = self._bytes_on_disk(job)
                await self.interpreter.apply(
                    lambda s: lifecycle.decide_cancel(
                        s, job_id, discard=discard, has_worker=False, bytes_on_disk=on_disk
                    )
                )
                self._specs.pop(job_id, None)
        if has_worker:
            await self._stop_cancelled(job_id, discard)

    async def _stop_cancelled(self, job_id: str, discard: bool) -> None:
        # The stdin line, not SIGTERM: SIGTERM is also what the worker gets
        # when the service dies (PR_SET_PDEATHSIG), and must not read as a cancel.
        line = "cancel discard" if discard else "cancel"
        await self._pool.stop(job_id, line, grace=CANCEL_GRACE_SECONDS, timeout=0.5)

    async def shutdown(self) -> None:
        """Stop every worker, keeping partials; their jobs become ``interrupted``
        and resume at the next start (``resume_downloads_on_start``)."""
        self._shutting_down = True
        self._pool.close_all_stdin()  # EOF = "service going away": stop, keep partials, record nothing
        if not await self._pool.wait_all(CANCEL_GRACE_SECONDS + 3):
            self._pool.kill_all()
            await self._pool.wait_all(5)


def _ended(job_id: str) -> Callable[[RouterState], bool]:
    def ended(state: RouterState) -> bool:
        job = state.job(job_id)
        return job is None or not job.status.active

    return ended


def _worker_env(settings: Settings) -> dict[str, str]:
    token = {"HF_TOKEN": settings.hf_token} if settings.hf_token else {}
    extra = {"MODELROUTER_LOG_JSON": "true", "HF_ENDPOINT": settings.hf_endpoint, **token, **store_env(settings)}
    env = settings.worker_environment(**extra)
    # A download worker runs only for a download that was asked for, which --offline does not refuse (as
    # llama.cpp's router still downloads then): huggingface_hub would refuse it under HF_HUB_OFFLINE.
    env.pop("HF_HUB_OFFLINE", None)
    return env
