"""Startup reconciliation: account for everything a crash left half-done.

Runs after the fold is rebuilt and before the API serves. Each model in a
non-terminal state gets exactly one closing event:

* downloading -> ``download_interrupted`` (a surviving worker, identified by
  pid + start time + job id on its command line, is terminated first: adopting
  it would leave a process the new supervisor cannot wait on);
* loading / loaded / unloading -> ``instance_lost`` (survivors are killed);
* ``*.incomplete`` files no job refers to -> ``partial_file_found`` (left alone;
  ``modelrouter gc`` deletes them).
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import structlog

from service.core import download_lifecycle, instance_lifecycle
from service.core import events as ev
from service.core.cache_layout import CachePaths
from service.core.decision import Append
from service.core.state import DownloadJob, JobStatus, RouterState
from service.downloads.cache_files import find_partials, partial_bytes
from service.supervision.child_process import same_process_alive

_log = structlog.get_logger(__name__)


@dataclass
class ReconcilePlan:
    events: list[Append] = field(default_factory=list)
    interrupted: list[DownloadJob] = field(default_factory=list)
    lost_instances: int = 0
    orphans: int = 0


def _kill_survivor(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        return
    try:
        psutil.Process(pid).wait(3)
    except psutil.TimeoutExpired:
        os.killpg(pid, signal.SIGKILL)
    except psutil.NoSuchProcess:
        pass


def referenced_blobs(state: RouterState) -> set[str]:
    """sha256 of every file any download job names."""
    return {str(f.sha256) for m in state.models.values() for j in m.jobs.values() for f in j.files}


def plan_reconcile(state: RouterState, cache_dir: Path) -> ReconcilePlan:
    """Close every non-terminal state of the last run (killing verified survivors
    first); the events themselves are the core's decisions."""
    plan = ReconcilePlan()
    on_disk: dict[str, int] = {}
    for model in state.models.values():
        if model.active_job is None:
            continue
        job = model.jobs[model.active_job]
        if same_process_alive(job.pid, job.pid_started_at, marker=job.job_id):
            _log.warning("killing_surviving_download_worker", pid=job.pid, job_id=job.job_id)
            _kill_survivor(job.pid)  # type: ignore[arg-type]  # same_process_alive checked the pid
        on_disk[job.job_id] = partial_bytes(CachePaths(cache_dir, job.repo), (f.sha256 or "" for f in job.files))
        if job.status is not JobStatus.CANCELLING:
            plan.interrupted.append(job)  # resumable; a cancel asked before the crash is honoured
    killed: set[str] = set()
    for model in state.models.values():
        inst = model.instance
        if inst is not None and same_process_alive(inst.pid, inst.pid_started_at, marker=inst.instance_id):
            _log.warning("killing_surviving_inference_worker", pid=inst.pid, instance_id=inst.instance_id)
            _kill_survivor(inst.pid)  # type: ignore[arg-type]  # same_process_alive checked the pid
            killed.add(inst.instance_id)
    closing = download_lifecycle.reconcile(state, on_disk) + instance_lifecycle.reconcile(state, frozenset(killed))
    plan.events.extend(Append(event, name) for name, event in closing)
    plan.lost_instances = sum(1 for _, event in closing if isinstance(event, ev.InstanceLost))
    known = referenced_blobs(state)
    for partial in find_partials(cache_dir):
        sha = partial.name.removesuffix(".incomplete")
        size = partial.stat().st_size
        if sha not in known and state.partial_files.get(str(partial)) != size:
            plan.events.append(Append(ev.PartialFileFound(path=str(partial), bytes=size)))
        if sha not in known:
            plan.orphans += 1
    return plan


def elapsed_ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 2)
