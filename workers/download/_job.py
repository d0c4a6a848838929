"""One download job: lock, check, fetch every blob, publish into the HF cache, report.

Event order: ``download_started`` → ``download_progress``* → exactly one of
``download_finished`` / ``download_failed`` / ``download_cancelled`` (or
nothing when the parent died). A job refused before any transfer (a blob
locked by another process, not enough disk) emits ``download_failed``
without ``download_started``.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from service import __version__
from service.core import events as ev
from service.core.contracts import DownloadSpec, SpecFile
from service.core.disk_budget import shortfall
from service.core.events import FileRef
from workers.download._hf_cache import (
    CachePaths,
    LockHeld,
    acquire_lock,
    ensure_dirs,
    link_snapshot,
    publish_blob,
    release_lock,
    write_ref,
)
from workers.download._interrupts import DISCARD, PARENT, Interrupted, Interrupts
from workers.download._transfer import ProgressMeter, TransferConfig, TransferError, fetch_blob

EXIT_FINISHED, EXIT_FAILED, EXIT_CANCELLED, EXIT_PARENT_EXITED = 0, 1, 2, 3
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_COMMIT = re.compile(r"^[0-9a-f]{40}$")


def load_spec(arg: str) -> DownloadSpec:
    """``arg`` is inline JSON (starting with '{') or the path of a JSON file; the service's
    ``DownloadSpec.to_argv()``, read back strictly. A spec without an endpoint uses ``HF_ENDPOINT``."""
    text = arg if arg.lstrip().startswith("{") else Path(arg).read_text()
    spec = DownloadSpec.from_argv(text)
    if spec.endpoint:
        return spec
    endpoint = (os.environ.get("HF_ENDPOINT") or "https://huggingface.co").rstrip("/")
    return DownloadSpec(spec.repo, spec.revision, spec.commit, spec.quant, endpoint, spec.files, spec.reserve_bytes)


@dataclass(frozen=True, slots=True)
class _Job:
    """What every step of one job reports through: its id, spec, cache paths, events and log."""

    job_id: str
    spec: DownloadSpec
    paths: CachePaths
    emit: Callable[[ev.Event], None]
    log: Callable[..., None]

    def fail(self, reason: str, message: str, retryable: bool) -> int:
        self.log("download_failed", reason=reason, message=message, retryable=retryable)
        self.emit(ev.DownloadFailed(job_id=self.job_id, reason=reason, message=message, retryable=retryable))
        return EXIT_FAILED


def run_job(
    job_id: str,
    spec: DownloadSpec,
    cache_dir: Path,
    emit: Callable[[ev.Event], None],
    interrupts: Interrupts,
    cfg: TransferConfig,
    token: str | None,
    *,
    pid_started_at: float | None = None,
    log: Callable[..., None] = lambda *a, **k: None,
) -> int:
    """Run the job to completion, failure or cancellation; return the exit code.

    ``emit`` records this job's events (the runtime's typed emit)."""
    began = time.monotonic()
    job = _Job(job_id, spec, CachePaths(cache_dir, spec.repo), emit, log)
    blobs = {f.sha256: f for f in spec.files}  # one blob may back several paths
    locks: list[int] = []
    try:
        ensure_dirs(job.paths)
        for sha in sorted(blobs):
            locks.append(acquire_lock(job.paths.lock(sha)))
    except LockHeld as exc:
        return _release(locks, job.fail("internal", str(exc), True))
    except OSError as exc:
        return _release(locks, job.fail(*_os_failure(exc)))
    try:
        return _transfer(job, blobs, interrupts, cfg, token, pid_started_at, began)
    except Interrupted as stop:
        return _on_interrupted(stop, job_id, job.paths, blobs, emit, log)
    except TransferError as exc:
        return job.fail(exc.reason, exc.message, exc.retryable)
    except OSError as exc:
        return job.fail(*_os_failure(exc))
    finally:
        _release(locks, 0)


def _transfer(
    job: _Job,
    blobs: dict[str, SpecFile],
    interrupts: Interrupts,
    cfg: TransferConfig,
    token: str | None,
    pid_started_at: float | None,
    began: float,
) -> int:
    """With every blob locked: check the disk, fetch what is missing, publish, report."""
    spec, paths = job.spec, job.paths
    on_disk = {sha: _bytes_on_disk(paths, sha, f.size) for sha, f in blobs.items()}
    done = sum(on_disk.values())
    job.log("download_resolved", **_resolved(spec, done))
    missing = sum(f.size - on_disk[sha] for sha, f in blobs.items())
    short = shortfall(needed=missing, free=shutil.disk_usage(paths.blobs_dir).free, reserve=spec.reserve_bytes)
    if short is not None:  # the service's rule, checked again now that the bytes are about to land
        return job.fail("disk_full", f"{short.message} (in {paths.blobs_dir})", False)
    job.emit(
        ev.DownloadStarted(
            job_id=job.job_id,
            pid=os.getpid(),
            pid_started_at=pid_started_at,
            commit=spec.commit,
            files=spec.refs(),
            total_bytes=spec.total_bytes,
            resumed_bytes=done,
        )
    )
    meter = ProgressMeter(spec.total_bytes, done, lambda d: job.emit(ev.DownloadProgress(job_id=job.job_id, **d)))
    headers = hub_headers(token)
    for sha, f in sorted(blobs.items(), key=lambda kv: kv[1].path):
        if on_disk[sha] == f.size and paths.blob(sha).exists():
            continue  # published by an earlier job: verified then, counts as done
        url = f.url or file_url(spec.endpoint, spec.repo, spec.commit, f.path)
        fetch_blob(url, headers, str(paths.incomplete(sha)), f.size, sha, cfg, meter, interrupts, on_disk[sha], job.log)
        publish_blob(paths.incomplete(sha), paths.blob(sha))
    published = _publish_snapshot(paths, spec)
    meter.finish()
    finished = ev.DownloadFinished(
        job_id=job.job_id,
        commit=spec.commit,
        files=published,
        bytes_total=spec.total_bytes,
        bytes_transferred=meter.transferred,
        duration_ms=round((time.monotonic() - began) * 1000, 1),
    )
    job.log("download_finished", bytes_transferred=finished.bytes_transferred, duration_ms=finished.duration_ms)
    job.emit(finished)
    return EXIT_FINISHED


def _resolved(spec: DownloadSpec, resumed_bytes: int) -> dict[str, object]:
    """What the job's log says it resolved and where it resumes (docs/operations.md, the workers' logs)."""
    files = [f.path for f in spec.files]
    return {
        "repo": spec.repo,
        "commit": spec.commit,
        "files": files,
        "total_bytes": spec.total_bytes,
        "resumed_bytes": resumed_bytes,
    }


def _publish_snapshot(paths: CachePaths, spec: DownloadSpec) -> tuple[FileRef, ...]:
    """Link every file of the commit to its verified blob, then record the revision; the files
    as ``download_finished`` reports them."""
    published = []
    for f in spec.files:
        link = link_snapshot(paths, spec.commit, f.path, f.sha256)
        published.append(
            FileRef(
                path=f.path, size=f.size, sha256=f.sha256, blob_path=str(paths.blob(f.sha256)), snapshot_path=str(link)
            )
        )
    write_ref(paths, spec.revision, spec.commit)
    return tuple(published)


def _on_interrupted(
    stop: Interrupted,
    job_id: str,
    paths: CachePaths,
    blobs: dict[str, SpecFile],
    emit: Callable[[ev.Event], None],
    log: Callable[..., None],
) -> int:
    """A cancel (the partials kept, or discarded, then ``download_cancelled``) or the parent's death."""
    if stop.kind == PARENT:
        # The service's recovery records download_interrupted itself.
        log("parent_exited", job_id=job_id)
        return EXIT_PARENT_EXITED
    discard = stop.kind == DISCARD
    log("download_cancelled", discard=discard)
    if discard:
        for sha in blobs:
            _unlink(paths.incomplete(sha))
    kept = sum(_bytes_on_disk(paths, sha, f.size) for sha, f in blobs.items())
    emit(ev.DownloadCancelled(job_id=job_id, discarded=discard, bytes_on_disk=kept))
    return EXIT_CANCELLED


def file_url(endpoint: str, repo: str, commit: str, path: str) -> str:
    """Fallback for specs without ``url`` (the service puts ``hf_hub_url``'s in).

    Not imported from huggingface_hub here: with its httpx2 it added ~0.1 s to
    every worker's start-up for two string functions.
    """
    return f"{endpoint}/{repo}/resolve/{quote(commit, safe='')}/{quote(path)}"


def hub_headers(token: str | None) -> dict[str, str]:
    """What ``build_hf_headers(token=token or False)`` sends, plus raw bytes only."""
    headers = {
        "User-Agent": f"modelrouter/{__version__}; python/{sys.version.split()[0]}",
        "Accept-Encoding": "identity",  # sizes and ranges are about raw bytes
    }
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return headers


def _os_failure(exc: OSError) -> tuple[str, str, bool]:
    """(reason, message, retryable) for an OS error outside the copy loop (dirs, links, refs)."""
    if exc.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT):
        return "disk_full", str(exc), False
    return "internal", f"{type(exc).__name__}: {exc}", False


def _bytes_on_disk(paths: CachePaths, sha: str, size: int) -> int:
    """Bytes of this blob already present: the full size if published, else the partial's (capped)."""
    try:
        if paths.blob(sha).stat().st_size == size:
            return size
    except FileNotFoundError:
        pass
    try:
        return min(paths.incomplete(sha).stat().st_size, size)
    except FileNotFoundError:
        return 0


def _unlink(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


def _release(locks: list[int], code: int) -> int:
    while locks:
        try:
            release_lock(locks.pop())
        except OSError as exc:
            print(f"download worker: releasing a lock failed: {exc}", file=sys.stderr)
    return code
