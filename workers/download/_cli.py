"""Download worker: one OS process per download job.

    python -m workers.download --job-id ID --model NAME --cache-dir DIR --spec FILE_OR_JSON
        [--db PATH | --events PATH]  [--stall-timeout S] [--retry-base S] [--retry-cap S]
        [--max-retries N] [--parent-pid PID] [--stdin-control] [--no-fsync]

``--spec`` is ``Resolution.to_spec()`` from :mod:`service.downloads.resolution`
(repo, revision, commit, endpoint, files with path/size/sha256), inline or as a
file. The token comes from ``HF_TOKEN`` in the environment (never argv: it
would show in ``ps``). Files land in the HF cache layout under ``--cache-dir``
(see :mod:`workers.download._hf_cache`); partials are resumable by any later worker.

Events (every payload carries ``job_id``; each is the class of that name in
``service/core/events.py``, emitted through :mod:`workers.runtime._worker_runtime`), to the
event store with ``--db``, else JSON lines to ``--events`` or stdout:

* ``download_started {pid, pid_started_at, commit, files:[{path,size,sha256}], total_bytes, resumed_bytes}``
* ``download_progress {bytes_done, bytes_total, bytes_per_second, eta_seconds}``
  (at most one per 0.5 s and per 0.5 %; the final 100 % one always)
* ``download_finished {commit, files:[{path,size,sha256,blob_path,snapshot_path}], bytes_total,
  bytes_transferred, duration_ms}``
* ``download_failed {reason, message, retryable}``; reason is not_found, unauthorized,
  network, disk_full, checksum_mismatch or internal (``worker_crashed`` is the
  service's, for a worker that died without an event)
* ``download_cancelled {discarded, bytes_on_disk}``

Control. The service runs the worker with ``--stdin-control`` and cancels it
with a stdin line: ``cancel`` keeps the partials, ``cancel discard`` deletes
them. Under ``--stdin-control`` a SIGTERM is never a cancel: it is
``PR_SET_PDEATHSIG`` (the service died), like EOF on the stdin pipe; the worker
then stops, keeps partials and emits nothing, and the service's recovery
records ``download_interrupted``. Without ``--stdin-control`` (by hand, in
tests) signals cancel: ``SIGTERM`` keeps partials, ``SIGUSR1`` deletes them.
A cancel takes effect within milliseconds, even during a stall. Spawn the
worker from a long-lived thread: Linux sends the death signal when the
*thread* that forked it exits. A SIGTERM in the first ~0.1 s (before handlers
exist) kills the process by the signal (returncode -15) with no event: treat
as cancelled.

Exit codes: 0 finished, 1 failed (after ``download_failed``), 2 cancelled
(after ``download_cancelled``), 3 parent exited (no event), 64 bad usage.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from workers.download._interrupts import Interrupts
from workers.runtime import Parent

if TYPE_CHECKING:  # imported in main, after the handlers are installed
    from workers.runtime import WorkerRuntime

EXIT_PARENT_EXITED, EXIT_USAGE = 3, 64


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # argparse's default exit code 2 would read as "cancelled".
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m workers.download", description="Download one model into the HF cache.")
    p.add_argument("--job-id", required=True)
    p.add_argument("--model", required=True, help="canonical model name (the event stream key)")
    p.add_argument("--cache-dir", required=True, type=Path, help="HF hub cache directory, e.g. <data>/hub")
    p.add_argument("--spec", required=True, help="resolution JSON, inline or a file path")
    p.add_argument("--db", help="SQLite event store; without it events go to --events or stdout")
    p.add_argument("--database-url", help="PostgreSQL event store (postgresql://user@host/db), instead of --db")
    p.add_argument("--events", help="JSON-lines event file when --db is absent ('-' = stdout)")
    p.add_argument("--parent-pid", type=int, help="exit at once if our parent is not this pid")
    p.add_argument(
        "--stdin-control",
        action="store_true",
        help="read 'cancel' / 'cancel discard' lines from stdin; EOF means the parent died",
    )
    env = os.environ.get
    p.add_argument(
        "--stall-timeout",
        type=float,
        default=float(env("MODELROUTER_STALL_TIMEOUT", "30")),
        help="seconds without a byte before a retry (env MODELROUTER_STALL_TIMEOUT)",
    )
    p.add_argument("--retry-base", type=float, default=float(env("MODELROUTER_RETRY_BASE", "1.0")))
    p.add_argument("--retry-cap", type=float, default=float(env("MODELROUTER_RETRY_CAP", "30.0")))
    p.add_argument(
        "--max-retries",
        type=int,
        default=int(env("MODELROUTER_MAX_RETRIES", "5")),
        help="failed attempts in a row without progress before giving up",
    )
    p.add_argument("--no-fsync", action="store_true", help="skip fsync before publishing (benchmarks only)")
    return p


def main(argv: list[str] | None = None) -> int:
    # First, before the slow imports below: who our parent is (read later it
    # may already be init), and handlers, so an early cancel is handled.
    parent = Parent()
    interrupts = Interrupts(parent)
    interrupts.install()
    # With SIGXFSZ ignored, exceeding RLIMIT_FSIZE makes write() fail with EFBIG
    # (reported as disk_full) instead of killing the process.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    args = build_parser().parse_args(argv)
    if args.parent_pid is not None:
        parent.pid = args.parent_pid

    from workers.runtime import DOWNLOAD_WORKER, WorkerRuntime

    runtime = WorkerRuntime.open(
        DOWNLOAD_WORKER,
        model=args.model,
        owner_id=args.job_id,
        db=args.database_url or args.db,
        events=args.events,
        parent=parent,
    )
    try:
        return _run(args, runtime, interrupts)
    finally:
        runtime.close()


def _run(args: argparse.Namespace, runtime: WorkerRuntime, interrupts: Interrupts) -> int:
    if not runtime.parent.die_with(signal.SIGTERM):
        runtime.log.info("parent_exited_before_start")
        return EXIT_PARENT_EXITED
    # Opt-in only: an inherited stdin that is already at EOF (a shell heredoc,
    # a closed pipe) would otherwise read as "parent died".
    commands = {"cancel": interrupts.on_cancel, "stop": interrupts.on_cancel}
    if args.stdin_control and runtime.control(commands, on_eof=interrupts.on_stdin_eof):
        interrupts.stdin_control = True

    from service.core import events as ev
    from workers.download._job import EXIT_FAILED, load_spec, run_job
    from workers.download._transfer import TransferConfig

    def fail(message: str) -> int:
        runtime.emit(ev.DownloadFailed(job_id=args.job_id, reason="internal", message=message, retryable=False))
        return EXIT_FAILED

    try:
        spec = load_spec(args.spec)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return fail(f"invalid --spec: {type(exc).__name__}: {exc}")
    cfg = TransferConfig(
        stall_timeout=args.stall_timeout,
        max_retries=args.max_retries,
        retry_base=args.retry_base,
        retry_cap=args.retry_cap,
        fsync=not args.no_fsync,
    )
    token = os.environ.get("HF_TOKEN") or None
    try:
        return run_job(
            args.job_id,
            spec,
            args.cache_dir,
            runtime.emit,
            interrupts,
            cfg,
            token,
            pid_started_at=runtime.started_at,
            log=runtime.log.info,
        )
    except Exception as exc:
        runtime.log.exception("worker_error")
        return fail(f"{type(exc).__name__}: {exc}")
