"""Download jobs: the thin driver around ``core.download_lifecycle``.

One ``workers.download`` process per job. The worker records its own start,
progress and outcome; the service records the request, a cancel request, the
outcome of a worker that died without one, and starts queued jobs in request
order as far as ``max_downloads`` allows. The decide -> append step is
serialised by one lock that is never held while waiting for a worker.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

import structlog

from service.core import download_lifecycle as lifecycle
from service.core import events as ev
from service.core.cache_layout import CachePaths
from service.core.processes import ProcessExit
from service.core.state import DownloadJob, RouterState
from service.downloads.cache_files import partial_bytes
from service.downloads.resolution import worker_spec
from service.event_store.codec import NewEvent
from service.live_state import LiveState
from service.settings import Settings
from service.supervision.effects import Effects
from service.supervision.worker_args import store_argv, store_env
from service.supervision.worker_pool import WorkerPool

_log = structlog.get_logger(__name__)
CANCEL_GRACE_SECONDS = 1.5  # then SIGKILL: a cancel takes effect within 2 s


class DownloadSupervisor:
    """Owns the download worker processes of this service instance."""

    def __init__(self, settings: Settings, live: LiveState, effects: Effects | None = None) -> None:
        self.settings = settings
        self.live = live
        self.fx = effects or Effects()
        self._pool = WorkerPool(self.fx.spawn, self._on_exit)
        self._specs: dict[str, dict[str, Any]] = {}  # job id -> worker spec, until its worker starts
        self._lock = asyncio.Lock()
        self._shutting_down = False

    async def request(self, model: str, resolution: dict[str, Any]) -> tuple[str | None, bool, bool]:
        """Start (or join) the download of ``model``. Returns
        ``(job_id, joined, already_downloaded)``."""
        found: list[lifecycle.DownloadDecision] = []

        def decide(state: RouterState) -> list[NewEvent]:
            found[:] = [lifecycle.request_download(state, model, self.fx.new_job_id(), resolution)]
            return [NewEvent(e, model=model) for e in found[0].events]

        async with self._lock:
            await self.live.decide(decide)
            decision = found[0]
            if decision.existing_job is not None:
                return decision.existing_job, True, False
            if decision.already_downloaded:
                return None, False, True
            assert decision.job_id is not None
            self._specs[decision.job_id] = resolution
            await self._start_queued_locked()
            return decision.job_id, False, False

    async def resume(self, job: DownloadJob, endpoint: str) -> None:
        """``interrupted -> queued`` for a job the last run left; a worker resumes it
        from the partial files when a download slot is free."""
        files = [{k: f[k] for k in ("path", "size", "sha256")} for f in job.files]
        async with self._lock:
            self._specs[job.job_id] = worker_spec(job.repo, job.revision, job.commit, job.quant, endpoint, files)
            resumed = ev.DownloadResumed(job_id=job.job_id, bytes_on_disk=self._bytes_on_disk(job))
            await self.live.record([NewEvent(resumed, model=job.model)])
            await self._start_queued_locked()

    async def _start_queued_locked(self) -> None:
        for job in lifecycle.waiting_to_start(self.live.state, self._pool.active(), self.settings.max_downloads):
            spec = self._specs.pop(job.job_id, None)
            if spec is None:
                continue  # queued by an earlier run and not resumed: nothing to fetch with
            await self._spawn(job, spec)

    async def _spawn(self, job: DownloadJob, spec: dict[str, Any]) -> None:
        argv = [
            sys.executable, "-m", "workers.download",
            "--job-id", job.job_id,
            "--model", job.model,
            "--cache-dir", str(self.settings.cache_dir),
            "--spec", json.dumps(spec),
            *store_argv(self.settings),
            "--stall-timeout", str(self.settings.stall_timeout),
            "--parent-pid", str(os.getpid()),
            "--stdin-control",
        ]  # fmt: skip
        try:
            await self._pool.spawn(job.job_id, argv, name=f"download:{job.job_id}", env=_worker_env(self.settings))
        except OSError as exc:
            failed = ev.DownloadFailed(
                job_id=job.job_id, reason="internal", message=f"cannot start a download worker: {exc}"
            )

            def decide(state: RouterState) -> list[NewEvent]:
                current = state.job(job.job_id)
                return [NewEvent(failed, model=job.model)] if current is not None and current.status.active else []

            await self.live.decide(decide)

    async def _on_exit(self, job_id: str, exit_: ProcessExit) -> None:
        state = await self.live.sync()  # the worker appends its outcome before exiting
        job = state.job(job_id)
        async with self._lock:
            if job is not None:
                if job.discard_requested:
                    self._discard_partials(job)
                on_disk = self._bytes_on_disk(job)
                outcome: list[ev.Event] = []

                def decide(state: RouterState) -> list[NewEvent]:
                    outcome[:] = lifecycle.on_worker_exit(
                        state, job_id, exit_, shutting_down=self._shutting_down, bytes_on_disk=on_disk
                    )
                    return [NewEvent(e, model=job.model) for e in outcome]

                await self.live.decide(decide)
                if outcome:
                    _log.warning("download_worker_lost", job_id=job_id, outcome=outcome[0].TYPE, how=exit_.describe())
            if not self._shutting_down:
                await self._start_queued_locked()

    def _paths(self, job: DownloadJob) -> CachePaths:
        return CachePaths(self.settings.cache_dir, job.repo)

    def _bytes_on_disk(self, job: DownloadJob) -> int:
        return partial_bytes(self._paths(job), [str(f.get("sha256", "")) for f in job.files])

    def _discard_partials(self, job: DownloadJob) -> None:
        paths = self._paths(job)
        for f in job.files:
            paths.incomplete(str(f.get("sha256", ""))).unlink(missing_ok=True)

    async def cancel(self, job_id: str, *, discard: bool) -> DownloadJob:
        """Ask the worker to stop over its stdin (``cancel`` keeps partials,
        ``cancel discard`` deletes them); a queued job without a worker is
        cancelled at once. Returns the job once it has ended."""
        async with self._lock:
            job = lifecycle.active_job(self.live.state, job_id)
            has_worker = job_id in self._pool
            if discard and not has_worker:
                self._discard_partials(job)
            on_disk = self._bytes_on_disk(job)

            def decide(state: RouterState) -> list[NewEvent]:
                events = lifecycle.cancel(state, job_id, discard=discard, has_worker=has_worker, bytes_on_disk=on_disk)
                return [NewEvent(e, model=job.model) for e in events]

            await self.live.decide(decide)  # refuses a job that ended meanwhile (409)
            self._specs.pop(job_id, None)
        if has_worker:
            # The stdin line, not SIGTERM: SIGTERM is also what the worker gets
            # when the service dies (PR_SET_PDEATHSIG), and must not read as a cancel.
            line = "cancel discard" if discard else "cancel"
            await self._pool.stop(job_id, line, grace=CANCEL_GRACE_SECONDS, timeout=0.5)
        ended = (await self.live.sync()).job(job_id)
        assert ended is not None
        return ended

    async def shutdown(self) -> None:
        """Stop every worker, keeping partials; their jobs become ``interrupted``
        and resume at the next start (``resume_downloads_on_start``)."""
        self._shutting_down = True
        self._pool.close_all_stdin()  # EOF = "service going away": stop, keep partials, record nothing
        if not await self._pool.wait_all(CANCEL_GRACE_SECONDS + 3):
            self._pool.kill_all()
            await self._pool.wait_all(5)


def _worker_env(settings: Settings) -> dict[str, str]:
    env = {**os.environ, "MODELROUTER_SYNCHRONOUS": settings.synchronous, "MODELROUTER_LOG_JSON": "true"}
    env.update(store_env(settings))
    env["HF_ENDPOINT"] = settings.hf_endpoint
    if settings.hf_token:
        env["HF_TOKEN"] = settings.hf_token
    return env
