"""The download job lifecycle: its transitions, and the decisions on it.

    [*] --download_requested--> queued --download_started--> running
    queued/running --download_cancel_requested--> cancelling
    running/cancelling --download_finished--> finished
    queued/running/cancelling --download_failed | download_cancelled | download_interrupted--> (ended)
    interrupted --download_resumed--> queued

Every job ends with exactly one terminal event (finished, failed, cancelled
or interrupted; an interrupted job may be resumed under the same id). The
worker records ``download_started``, progress and its own outcome; the service
records the request, a cancel request, the outcome of a worker that died
without one, and, at start-up, what a crash interrupted.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

import service.core.events as ev
from service.core.contracts import DownloadSpec
from service.core.decision import Append, Decision, Effect, about, nothing
from service.core.errors import CommandRejected
from service.core.holders import held_live
from service.core.processes import ProcessExit
from service.core.state import DownloadJob, JobStatus, ModelState, RouterState
from service.core.transitions import Lifecycle, edges

_Q, _R, _C = JobStatus.QUEUED, JobStatus.RUNNING, JobStatus.CANCELLING
_F, _X, _K, _I = JobStatus.FINISHED, JobStatus.FAILED, JobStatus.CANCELLED, JobStatus.INTERRUPTED

DOWNLOAD_LIFECYCLE = Lifecycle(
    name="download",
    table=edges(
        [
            ((None,), "download_requested", _Q),
            ((_Q,), "download_started", _R),
            ((_C,), "download_started", "same"),
            ((_R, _C), "download_progress", "same"),
            ((_R, _C), "download_finished", _F),  # a cancel that lost the race to the last byte
            ((_Q, _R), "download_cancel_requested", _C),
            ((_Q, _R, _C), "download_failed", _X),
            ((_Q, _R, _C), "download_cancelled", _K),
            ((_Q, _R, _C), "download_interrupted", _I),
            ((_I,), "download_resumed", _Q),
        ]
    ),
    # A worker killed after a cancel timed out may have appended progress on its way out.
    late=frozenset((end, "download_progress") for end in (_F, _X, _K, _I)),
)


@dataclass(frozen=True, slots=True)
class Requested:
    """The answer to a download request: a new ``job_id``, or the ``existing_job`` it joined, or
    nothing to do (``already_downloaded``)."""

    job_id: str | None
    existing_job: str | None
    already_downloaded: bool


@dataclass(frozen=True, slots=True)
class SpawnDownload(Effect):
    """Give queued job ``job_id`` a download worker."""

    job_id: str


@dataclass(frozen=True, slots=True)
class TakePlaced(Effect):
    """Run job ``job_id``, which another node placed on this one (``download_requested`` with ``node``)."""

    job_id: str


def request_download(
    state: RouterState, model: str, job_id: str, spec: DownloadSpec, node: str | None = None
) -> Decision[Requested]:
    """One download per model: a running job is joined; a model whose files for
    this commit are present (in a cluster: on a node that is up) is not fetched again.
    ``node``: the node that downloads it (in a cluster, the one that will serve it); None: the one
    that records the request."""
    current = state.models.get(model)
    if current is not None and current.active_job is not None:
        return nothing(Requested(job_id=None, existing_job=current.active_job, already_downloaded=False))
    if current is not None and current.available and held_live(state, current) and _same_commit(current, spec.commit):
        return nothing(Requested(job_id=None, existing_job=None, already_downloaded=True))
    requested = ev.DownloadRequested(
        job_id=job_id,
        repo=spec.repo,
        revision=spec.revision or "main",
        commit=spec.commit,
        quant=spec.quant,
        files=spec.refs(),
        total_bytes=spec.total_bytes,
        node=node,
    )
    return Decision(Requested(job_id=job_id, existing_job=None, already_downloaded=False), (Append(requested, model),))


def _same_commit(model: ModelState, commit: str) -> bool:
    if model.source != "cache" or not model.last_job:
        return model.source != "cache"  # local files: nothing to re-fetch
    job = model.jobs.get(model.last_job)
    return job is not None and (not commit or job.commit == commit)


def active_job(state: RouterState, job_id: str) -> DownloadJob:
    """The job, refusing unknown or ended ones (the cancel endpoints' answer)."""
    job = state.job(job_id)
    if job is None:
        raise CommandRejected("job_not_found", f"download job {job_id!r} does not exist")
    if not job.status.active:
        raise CommandRejected(
            "conflict", f"download job {job_id!r} is already {job.status.value}", job_status=job.status.value
        )
    return job


@dataclass(frozen=True, slots=True)
class CancelPlaced(Effect):
    """Another node asked to cancel job ``job_id``, which runs on this one: stop its worker (or, with
    none yet, record the job cancelled)."""

    job_id: str
    discard: bool


def runs_elsewhere(state: RouterState, job: DownloadJob, node: str | None) -> bool:
    """In a cluster, whether ``job`` is another live node's: that node's worker moves its bytes, and
    that node ends it."""
    if node is None or job.node is None or job.node == node:
        return False
    other = state.nodes.get(job.node)
    return other is not None and not other.gone


def cancel(
    state: RouterState, job_id: str, *, discard: bool, has_worker: bool, bytes_on_disk: int, node: str | None = None
) -> list[ev.Event]:
    """``queued/running -> cancelling``; a job with no worker process (queued, or
    its worker already gone) is cancelled at once by the service itself, unless it is another
    live node's (``node`` decides): that node stops its worker, which records the end."""
    job = active_job(state, job_id)
    events: list[ev.Event] = []
    if job.status is not JobStatus.CANCELLING:
        events.append(ev.DownloadCancelRequested(job_id=job_id, discard=discard))
    if not has_worker and not runs_elsewhere(state, job, node):
        events.append(ev.DownloadCancelled(job_id=job_id, discarded=discard, bytes_on_disk=bytes_on_disk))
    return events


def on_worker_exit(
    state: RouterState, job_id: str, exit: ProcessExit, *, shutting_down: bool, bytes_on_disk: int
) -> list[ev.Event]:
    """The outcome to record for a worker that exited without recording one:
    nothing if it did (the job already ended); ``download_cancelled`` if a cancel
    was asked (killed before it could say so); ``download_interrupted`` when the
    service is stopping; else ``download_failed`` (``worker_crashed``)."""
    job = state.job(job_id)
    if job is None or not job.status.active:
        return []
    if job.status is JobStatus.CANCELLING:
        return [ev.DownloadCancelled(job_id=job_id, discarded=job.discard_requested, bytes_on_disk=bytes_on_disk)]
    if shutting_down:
        return [ev.DownloadInterrupted(job_id=job_id, bytes_on_disk=bytes_on_disk, reason="shutdown")]
    tail = exit.stderr_tail.strip().splitlines()[-3:]
    message = f"download worker died ({exit.describe()}) without reporting an outcome" + (
        f": {' | '.join(tail)}" if tail else ""
    )
    return [ev.DownloadFailed(job_id=job_id, reason="worker_crashed", message=message, retryable=True)]


def decide_cancel(
    state: RouterState,
    job_id: str,
    *,
    discard: bool,
    has_worker: bool,
    bytes_on_disk: int,
    node: str | None = None,
) -> Decision[DownloadJob]:
    """:func:`cancel` as a decision about the job's model; answers the job as it was."""
    job = active_job(state, job_id)
    events = cancel(state, job_id, discard=discard, has_worker=has_worker, bytes_on_disk=bytes_on_disk, node=node)
    return Decision(job, about(job.model, events))


def decide_worker_exit(
    state: RouterState, job_id: str, exit: ProcessExit, *, shutting_down: bool, bytes_on_disk: int
) -> Decision[ev.Event | None]:
    """:func:`on_worker_exit` as a decision; answers the outcome the service recorded, if any."""
    job = state.job(job_id)
    events = on_worker_exit(state, job_id, exit, shutting_down=shutting_down, bytes_on_disk=bytes_on_disk)
    if job is None or not events:
        return nothing(None)
    return Decision(events[0], about(job.model, events))


def decide_spawn_failed(state: RouterState, job_id: str, message: str) -> Decision[None]:
    """A worker that could not even be started fails its job (``internal``), unless it ended meanwhile."""
    job = state.job(job_id)
    if job is None or not job.status.active:
        return nothing(None)
    failed = ev.DownloadFailed(job_id=job_id, reason="internal", message=f"cannot start a download worker: {message}")
    return Decision(None, (Append(failed, job.model),))


def decide_resume(job: DownloadJob, bytes_on_disk: int) -> Decision[None]:
    """``interrupted -> queued``: the service takes up a job the last run left."""
    resumed = ev.DownloadResumed(job_id=job.job_id, bytes_on_disk=bytes_on_disk)
    return Decision(None, (Append(resumed, job.model),))


def decide_starts(
    state: RouterState, running: Collection[str], max_running: int, node: str | None = None
) -> Decision[None]:
    """Queued jobs that get a worker now (:func:`waiting_to_start`), as effects."""
    waiting = waiting_to_start(state, running, max_running, node)
    return Decision(None, effects=tuple(SpawnDownload(j.job_id) for j in waiting))


def waiting_to_start(
    state: RouterState, running: Collection[str], max_running: int, node: str | None = None
) -> list[DownloadJob]:
    """Queued jobs of ``node`` (in a cluster: those placed on it, or recorded by a service without
    ``--node``) to give a worker now, oldest request first: all of them, or as many as fit beside the
    ``running`` workers when ``max_running`` > 0."""
    queued = [
        job
        for job in state.all_jobs()
        if job.status is JobStatus.QUEUED
        and job.job_id not in running
        and (node is None or job.node is None or job.node == node)
    ]
    if max_running <= 0:
        return queued
    return queued[: max(0, max_running - len(running))]


def reconcile(state: RouterState, bytes_on_disk: Mapping[str, int]) -> list[tuple[str, ev.Event]]:
    """Start-up: each active job of the previous run ends. A job whose cancel was
    asked is cancelled (never resumed); the others are interrupted (resumable)."""
    planned: list[tuple[str, ev.Event]] = []
    for model in state.models.values():
        if model.active_job is None:
            continue
        job = model.jobs[model.active_job]
        on_disk = bytes_on_disk.get(job.job_id, 0)
        end: ev.Event = (
            ev.DownloadCancelled(job_id=job.job_id, discarded=False, bytes_on_disk=on_disk)
            if job.status is JobStatus.CANCELLING
            else ev.DownloadInterrupted(job_id=job.job_id, bytes_on_disk=on_disk)
        )
        planned.append((model.name, end))
    return planned
