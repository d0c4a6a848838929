"""Download jobs: one ``workers.download`` process per job, watched to the end.

The worker records its own progress and outcome. The service records what only
it can know: the request, a cancel request, and a worker that died without
saying why (``download_failed`` with reason ``worker_crashed``).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import uuid
from typing import Any

import structlog

from service.core import commands
from service.core import events as ev
from service.core.cache_layout import CachePaths
from service.core.state import DownloadJob, JobStatus
from service.downloads.cache_files import partial_bytes
from service.downloads.resolution import worker_spec
from service.event_store.codec import NewEvent
from service.live_state import LiveState
from service.settings import Settings
from service.supervision.child_process import ChildProcess

_log = structlog.get_logger(__name__)
CANCEL_GRACE_SECONDS = 1.5  # then SIGKILL: the issue allows 2 s for a cancel


class DownloadSupervisor:
    """Owns the download worker processes of this service instance."""

    def __init__(self, settings: Settings, live: LiveState) -> None:
        self.settings = settings
        self.live = live
        self._children: dict[str, ChildProcess] = {}
        self._watchers: set[asyncio.Task[None]] = set()
        self._lock = asyncio.Lock()
        self._shutting_down = False

    async def request(self, model: str, resolution: dict[str, Any]) -> tuple[str | None, bool, bool]:
        """Start (or join) the download of ``model``. Returns
        ``(job_id, joined, already_downloaded)``."""
        async with self._lock:
            decision = commands.request_download(self.live.state, model, str(uuid.uuid4()), resolution)
            if decision.existing_job is not None:
                return decision.existing_job, True, False
            if decision.already_downloaded:
                return None, False, True
            assert decision.job_id is not None
            await self.live.record([NewEvent(e, model=model) for e in decision.events])
            await self._spawn(decision.job_id, model, resolution)
            return decision.job_id, False, False

    async def resume(self, job: DownloadJob, endpoint: str) -> None:
        """Start a new worker for an interrupted job; it resumes from the partial files."""
        files = [{k: f[k] for k in ("path", "size", "sha256")} for f in job.files]
        spec = worker_spec(job.repo, job.revision, job.commit, job.quant, endpoint, files)
        async with self._lock:
            on_disk = self._bytes_on_disk(job)
            await self.live.record(
                [NewEvent(ev.DownloadResumed(job_id=job.job_id, bytes_on_disk=on_disk), model=job.model)]
            )
            await self._spawn(job.job_id, job.model, spec)

    async def _spawn(self, job_id: str, model: str, spec: dict[str, Any]) -> None:
        argv = [
            sys.executable, "-m", "workers.download",
            "--job-id", job_id,
            "--model", model,
            "--cache-dir", str(self.settings.cache_dir),
            "--spec", json.dumps(spec),
            "--db", str(self.settings.db_path),
            "--stall-timeout", str(self.settings.stall_timeout),
            "--parent-pid", str(os.getpid()),
            "--stdin-control",
        ]  # fmt: skip
        env = _worker_env(self.settings)
        child = await ChildProcess.spawn(argv, name=f"download:{job_id}", env=env)
        self._children[job_id] = child
        task = asyncio.create_task(self._watch(job_id, model, child), name=f"watch-download-{job_id}")
        self._watchers.add(task)
        task.add_done_callback(self._watchers.discard)

    async def _watch(self, job_id: str, model: str, child: ChildProcess) -> None:
        status = await child.wait()
        self._children.pop(job_id, None)
        # The worker appends its outcome before exiting: fold it before judging.
        state = await self.live.sync()
        job = state.job(job_id)
        if job is None or not job.status.active:
            return
        if job.status is JobStatus.CANCELLING:
            # Killed before it could record the cancel (e.g. SIGTERM during start-up).
            if job.discard_requested:
                self._discard_partials(job)
            outcome: ev.Event = ev.DownloadCancelled(
                job_id=job_id, discarded=job.discard_requested, bytes_on_disk=self._bytes_on_disk(job)
            )
        elif self._shutting_down:
            outcome = ev.DownloadInterrupted(job_id=job_id, bytes_on_disk=self._bytes_on_disk(job), reason="shutdown")
        else:
            how = f"signal {status.signal}" if status.signal is not None else f"exit code {status.exit_code}"
            tail = child.stderr_tail().strip().splitlines()[-3:]
            outcome = ev.DownloadFailed(
                job_id=job_id,
                reason="worker_crashed",
                message=f"download worker {child.pid} died ({how}) without reporting an outcome"
                + (f": {' | '.join(tail)}" if tail else ""),
                retryable=True,
            )
        await self.live.record([NewEvent(outcome, model=model)])
        _log.warning("download_worker_lost", job_id=job_id, event=outcome.TYPE)

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
        ``cancel discard`` deletes them); returns the job once it has left the
        active states."""
        state = self.live.state
        cancel_events = commands.cancel_download(state, job_id, discard=discard)
        job = state.job(job_id)
        assert job is not None
        await self.live.record([NewEvent(e, model=job.model) for e in cancel_events])
        child = self._children.get(job_id)
        if child is None:
            # No process (e.g. queued and never started): the service records the cancel itself.
            if discard:
                self._discard_partials(job)
            cancelled = ev.DownloadCancelled(job_id=job_id, discarded=discard, bytes_on_disk=self._bytes_on_disk(job))
            await self.live.record([NewEvent(cancelled, model=job.model)])
        else:
            # The stdin line, not SIGTERM: SIGTERM is also what the worker gets
            # when the service dies (PR_SET_PDEATHSIG), and must not read as a cancel.
            child.send_line("cancel discard" if discard else "cancel")
            try:
                await asyncio.wait_for(child.wait(), CANCEL_GRACE_SECONDS)
            except TimeoutError:
                child.signal_group(signal.SIGKILL)  # CANCELLING -> killed; _watch records the cancel
                await child.wait()
        return await self._settled(job_id)

    async def _settled(self, job_id: str, timeout: float = 5.0) -> DownloadJob:
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            job = (await self.live.sync()).job(job_id)
            assert job is not None
            if not job.status.active or asyncio.get_running_loop().time() > deadline:
                return job
            await asyncio.sleep(0.02)

    async def shutdown(self) -> None:
        """Stop every worker, keeping partials; jobs become ``interrupted`` and
        resume at the next start (``resume_downloads_on_start``)."""
        self._shutting_down = True
        for child in list(self._children.values()):
            child.close_stdin()  # EOF = "service going away": stop, keep partials, record nothing
        if self._watchers:
            await asyncio.wait(set(self._watchers), timeout=CANCEL_GRACE_SECONDS + 3)
        for child in list(self._children.values()):
            child.signal_group(signal.SIGKILL)


def _worker_env(settings: Settings) -> dict[str, str]:
    env = {**os.environ, "MODELROUTER_SYNCHRONOUS": settings.synchronous, "MODELROUTER_LOG_JSON": "true"}
    env["HF_ENDPOINT"] = settings.hf_endpoint
    if settings.hf_token:
        env["HF_TOKEN"] = settings.hf_token
    return env
