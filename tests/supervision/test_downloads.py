"""``DownloadSupervisor`` in-process: a real SQLite log, real ``workers.download`` processes fetching from
the project's Hub server, a fake clock. What the supervisor records and what its workers record both land
in the one log, and every check reads the fold of that log."""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from devtools.hub_repos import make_repo
from devtools.hub_server import HubServer
from service.core import events as ev
from service.core.cache_layout import CachePaths
from service.core.contracts import DownloadSpec
from service.core.event_base import Recorded
from service.core.state import DownloadJob, JobStatus, RouterState
from service.downloads.resolution import resolve
from service.event_store.async_store import AsyncEventStore
from service.event_store.live_state import LiveState
from service.recovery.migrate import upgrade
from service.settings import Settings
from service.supervision.downloads import DownloadSupervisor
from service.supervision.surroundings import Surroundings
from tests.conftest_hub import unique_repo
from tests.supervision.fakes import FakeClock

pytestmark = pytest.mark.timeout(90)
MB = 1024 * 1024
WAIT = 45.0  # seconds: generous, real worker processes on two busy cores


@dataclass
class Downloads:
    """A supervisor over a real log, the log's records in order, and the settings its workers get."""

    sup: DownloadSupervisor
    live: LiveState
    settings: Settings
    records: list[Recorded] = field(default_factory=list)

    def of(self, job_id: str) -> list[Recorded]:
        return [r for r in self.records if getattr(r.event, "job_id", None) == job_id]

    def types(self, job_id: str) -> list[str]:
        return [r.type for r in self.of(job_id)]

    def job(self, job_id: str) -> DownloadJob:
        job = self.live.state.job(job_id)
        assert job is not None, job_id
        return job

    async def until(self, predicate: Callable[[RouterState], bool], what: str) -> RouterState:
        state = await self.live.wait_until(predicate, WAIT)
        assert state is not None, f"never: {what}; log: {[(r.type, r.model) for r in self.records]}"
        return state

    async def status(self, job_id: str, *statuses: JobStatus) -> DownloadJob:
        await self.until(lambda s: (j := s.job(job_id)) is not None and j.status in statuses, f"{job_id} {statuses}")
        return self.job(job_id)

    async def progress(self, job_id: str, at_least: int) -> DownloadJob:
        await self.until(lambda s: (j := s.job(job_id)) is not None and j.bytes_done >= at_least, f"{job_id} bytes")
        return self.job(job_id)

    def partials(self, job: DownloadJob) -> list[Path]:
        paths = CachePaths(self.settings.cache_dir, job.repo)
        return [p for f in job.files if (p := paths.incomplete(f.sha256 or "")).exists()]


@asynccontextmanager
async def downloads(home: Path, hub: HubServer, **values: object) -> AsyncIterator[Downloads]:
    """A download supervisor as the service builds it, pointed at the test Hub; shut down on exit."""
    settings = Settings(home=home, hf_endpoint=hub.url, disk_reserve_bytes=0, **values)  # type: ignore[arg-type]  # test overrides
    settings.cache_dir.mkdir(parents=True, exist_ok=True)
    upgrade(settings.db_path)
    store = AsyncEventStore(settings.db_path, source={"kind": "router"}, synchronous="NORMAL")
    live = LiveState(store)
    await live.start()
    jobs = itertools.count(1)
    fx = Surroundings(clock=FakeClock(), new_job_id=lambda: f"job{next(jobs)}")
    rig = Downloads(DownloadSupervisor(settings, live, fx), live, settings)
    live.add_listener(lambda r, _s: rig.records.append(r))
    try:
        yield rig
    finally:
        await rig.sup.shutdown()
        await live.stop()
        await store.close()


async def repo_on_hub(hub: HubServer, size: int, prefix: str = "dl") -> tuple[str, DownloadSpec]:
    """A repo of one GGUF of ``size`` bytes on the test Hub, and what the service resolves it to."""
    repo = unique_repo(prefix)
    make_repo(hub.root, repo, {"m-Q4_K_M.gguf": size})
    resolution = await asyncio.to_thread(resolve, repo, endpoint=hub.url)
    return repo, resolution.to_spec()


async def test_a_download_runs_to_finished_and_its_workers_events_land_in_the_log(
    tmp_path: Path, hub: HubServer
) -> None:
    repo, spec = await repo_on_hub(hub, 3 * MB)
    async with downloads(tmp_path, hub) as d:
        job_id, joined, already = await d.sup.request(repo, spec)
        assert (job_id, joined, already) == ("job1", False, False)
        job = await d.status(job_id, JobStatus.FINISHED, JobStatus.FAILED)
        assert job.status is JobStatus.FINISHED, job.error
        types = d.types(job_id)
        assert types[:2] == ["download_requested", "download_started"] and types[-1] == "download_finished"
        assert {r.source["kind"] for r in d.of(job_id)} == {"router", "download_worker"}  # the worker wrote its own
        assert job.bytes_done == job.bytes_total == 3 * MB
        blob = CachePaths(d.settings.cache_dir, repo).blob(spec.refs()[0].sha256 or "")
        assert blob.stat().st_size == 3 * MB and not d.partials(job)
        # The files are there for this commit: a second request fetches nothing.
        assert await d.sup.request(repo, spec) == (None, False, True)


@asynccontextmanager
async def _stalled_half_way(
    tmp_path: Path, hub: HubServer
) -> AsyncIterator[tuple[Downloads, str, DownloadSpec, str, DownloadJob]]:
    """A 4 MB download whose worker runs, stalled half-way on the Hub: ``(d, repo, spec, job_id, running)``."""
    repo, spec = await repo_on_hub(hub, 4 * MB)
    hub.set_faults({"kind": "stall", "repo": repo, "at_fraction": 0.5})
    async with downloads(tmp_path, hub) as d:
        job_id, _, _ = await d.sup.request(repo, spec)
        assert job_id is not None
        running = await d.progress(job_id, 1)
        yield d, repo, spec, job_id, running


async def test_a_second_request_for_a_model_joins_its_running_job(tmp_path: Path, hub: HubServer) -> None:
    async with _stalled_half_way(tmp_path, hub) as (d, repo, spec, job_id, _running):
        assert await d.sup.request(repo, spec) == (job_id, True, False)
        hub.reset()  # the stalled answer goes on
        assert (await d.status(job_id, JobStatus.FINISHED)).bytes_done == 4 * MB
        assert d.types(job_id).count("download_requested") == 1


async def test_a_cancel_stops_the_worker_and_keeps_its_partial(tmp_path: Path, hub: HubServer) -> None:
    async with _stalled_half_way(tmp_path, hub) as (d, _repo, _spec, job_id, running):
        ended = await d.sup.cancel(job_id, discard=False)
        assert ended.status is JobStatus.CANCELLED
        assert d.types(job_id)[-2:] == ["download_cancel_requested", "download_cancelled"]
        cancelled = d.of(job_id)[-1]
        assert cancelled.source["kind"] == "download_worker"  # the worker said so itself, from its stdin line
        assert isinstance(cancelled.event, ev.DownloadCancelled) and cancelled.event.bytes_on_disk > 0
        assert [p.stat().st_size > 0 for p in d.partials(ended)] == [True]
        assert running.pid is not None and not _alive(running.pid)


async def test_a_cancel_with_discard_deletes_the_partial(tmp_path: Path, hub: HubServer) -> None:
    async with _stalled_half_way(tmp_path, hub) as (d, _repo, _spec, job_id, _running):
        ended = await d.sup.cancel(job_id, discard=True)
        assert ended.status is JobStatus.CANCELLED and ended.discard_requested
        assert d.partials(ended) == []


@asynccontextmanager
async def _one_running_one_queued(tmp_path: Path, hub: HubServer) -> AsyncIterator[tuple[Downloads, str, str]]:
    """One download slot: a first job stalled half-way on the Hub, a second queued behind it."""
    first, first_spec = await repo_on_hub(hub, 4 * MB, "first")
    second, second_spec = await repo_on_hub(hub, 1 * MB, "second")
    hub.set_faults({"kind": "stall", "repo": first, "at_fraction": 0.5})
    async with downloads(tmp_path, hub, max_downloads=1) as d:
        one, _, _ = await d.sup.request(first, first_spec)
        two, _, _ = await d.sup.request(second, second_spec)
        assert one is not None and two is not None
        await d.progress(one, 1)
        yield d, one, two


async def test_queued_jobs_start_in_request_order_as_download_slots_free(tmp_path: Path, hub: HubServer) -> None:
    async with _one_running_one_queued(tmp_path, hub) as (d, one, two):
        assert d.job(two).status is JobStatus.QUEUED and d.types(two) == ["download_requested"]
        hub.reset()
        await d.status(one, JobStatus.FINISHED)
        assert (await d.status(two, JobStatus.FINISHED)).bytes_done == 1 * MB
        starts = [r.event.job_id for r in d.records if isinstance(r.event, ev.DownloadStarted)]
        assert starts == [one, two]


async def test_a_queued_job_without_a_worker_is_cancelled_by_the_supervisor_at_once(
    tmp_path: Path, hub: HubServer
) -> None:
    async with _one_running_one_queued(tmp_path, hub) as (d, one, two):
        ended = await d.sup.cancel(two, discard=False)
        assert ended.status is JobStatus.CANCELLED and ended.pid is None
        assert [r.source["kind"] for r in d.of(two)] == ["router", "router", "router"]
        assert d.job(one).status is JobStatus.RUNNING  # the slot's job goes on


async def test_a_worker_that_dies_without_an_outcome_is_recorded_crashed_and_retryable(
    tmp_path: Path, hub: HubServer
) -> None:
    async with _stalled_half_way(tmp_path, hub) as (d, repo, spec, job_id, running):
        assert running.pid is not None
        os.kill(running.pid, signal.SIGKILL)
        failed = await d.status(job_id, JobStatus.FAILED)
        assert failed.error is not None and failed.error.reason == "worker_crashed"
        assert "signal 9" in failed.error.message, failed.error.message
        last = d.of(job_id)[-1]
        assert last.type == "download_failed" and last.source["kind"] == "router"
        assert isinstance(last.event, ev.DownloadFailed) and last.event.retryable
        # The fold says the job ended: the next request is a new job, which resumes from the partial.
        hub.reset()
        again, joined, _ = await d.sup.request(repo, spec)
        assert again not in (None, job_id) and not joined
        assert again is not None
        done = await d.status(again, JobStatus.FINISHED)
        assert done.bytes_done == 4 * MB


async def test_a_transient_hub_error_is_retried_by_the_worker_and_the_job_finishes(
    tmp_path: Path, hub: HubServer
) -> None:
    repo, spec = await repo_on_hub(hub, 1 * MB)
    hub.set_faults({"kind": "status", "repo": repo, "status": 500, "times": 2, "methods": ["GET"]})
    env = {**os.environ, "MODELROUTER_RETRY_BASE": "0.05", "MODELROUTER_RETRY_CAP": "0.2"}
    async with downloads(tmp_path, hub, environment=env) as d:
        job_id, _, _ = await d.sup.request(repo, spec)
        assert job_id is not None
        job = await d.status(job_id, JobStatus.FINISHED, JobStatus.FAILED)
        assert job.status is JobStatus.FINISHED, job.error
        assert "download_failed" not in d.types(job_id)
        served = [r for r in hub.stats()["requests"] if r["file"] == f"{repo}/m-Q4_K_M.gguf" and r["method"] == "GET"]
        assert [r["status"] for r in served][:2] == [500, 500]


async def test_an_interrupted_partial_is_resumed_from_its_bytes_by_the_next_supervisor(
    tmp_path: Path, hub: HubServer
) -> None:
    async with _stalled_half_way(tmp_path, hub) as (d, repo, _spec, job_id, _running):
        await d.sup.shutdown()  # stdin EOF: the worker stops, keeping its partial
        interrupted = await d.status(job_id, JobStatus.INTERRUPTED)
        ended = d.of(job_id)[-1].event
        assert isinstance(ended, ev.DownloadInterrupted)
        kept = ended.bytes_on_disk
        assert kept > 0 and [p.stat().st_size for p in d.partials(interrupted)] == [kept]
    hub.reset()
    hub.reset_stats()
    async with downloads(tmp_path, hub) as d:  # the next run, over the same log and cache
        await d.live.sync()
        await d.sup.resume(d.job(job_id), hub.url)
        done = await d.status(job_id, JobStatus.FINISHED, JobStatus.FAILED)
        assert done.status is JobStatus.FINISHED, done.error
        resumed = d.of(job_id)[0].event
        assert isinstance(resumed, ev.DownloadResumed) and resumed.bytes_on_disk == kept
        started = next(r.event for r in d.of(job_id) if isinstance(r.event, ev.DownloadStarted))
        assert started.resumed_bytes == kept
        assert hub.bytes_served(repo, "m-Q4_K_M.gguf") == 4 * MB - kept


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
