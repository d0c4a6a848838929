"""The disk reserve rule (``service.core.disk_budget``): one rule for the API and the worker. Pure."""

from __future__ import annotations

from service.core.disk_budget import check_disk
from service.core.state import DownloadJob, JobStatus, ModelState, RouterState


def _job(job_id: str, model: str, status: JobStatus, done: int, total: int) -> DownloadJob:
    return DownloadJob(job_id=job_id, model=model, status=status, bytes_done=done, bytes_total=total)


def _state(*jobs: DownloadJob) -> RouterState:
    models = {
        j.model: ModelState(name=j.model, jobs={j.job_id: j}, active_job=j.job_id if j.status.active else None)
        for j in jobs
    }
    return RouterState(models=models, job_index={j.job_id: j.model for j in jobs})


class TestDiskBudget:
    def test_fits_when_the_reserve_stays_free(self) -> None:
        assert check_disk(_state(), "m", total_bytes=100, on_disk=0, free=1100, reserve=1000) is None

    def test_refused_when_it_would_eat_into_the_reserve(self) -> None:
        short = check_disk(_state(), "m", total_bytes=101, on_disk=0, free=1100, reserve=1000)
        assert short is not None and (short.needed, short.free, short.reserve) == (101, 1100, 1000)
        assert "101" in short.message and "1000" in short.message

    def test_bytes_already_on_disk_are_not_counted_again(self) -> None:
        assert check_disk(_state(), "m", total_bytes=500, on_disk=450, free=1100, reserve=1000) is None
        assert check_disk(_state(), "m", total_bytes=500, on_disk=500, free=0, reserve=1000) is None

    def test_other_running_downloads_still_need_their_bytes(self) -> None:
        other = _job("j1", "o", JobStatus.RUNNING, done=100, total=400)
        short = check_disk(_state(other), "m", total_bytes=100, on_disk=0, free=1350, reserve=1000)
        assert short is not None and short.pending == 300
        ended = _job("j1", "o", JobStatus.FINISHED, done=100, total=400)
        assert check_disk(_state(ended), "m", total_bytes=100, on_disk=0, free=1350, reserve=1000) is None

    def test_joining_a_running_job_is_never_refused(self) -> None:
        running = _job("j1", "m", JobStatus.RUNNING, done=0, total=10**12)
        assert check_disk(_state(running), "m", total_bytes=10**12, on_disk=0, free=0, reserve=10**9) is None
