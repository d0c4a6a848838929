"""One supervised child process: spawn, watch, stop. The only module that forks.

Every worker runs in its own process group (so a stop reaches any grandchild)
and gets ``PR_SET_PDEATHSIG`` = SIGKILL, so it dies with the service even when
the service is SIGKILLed; workers also treat EOF on stdin as "the service is
gone". The last 8 KiB of stderr are kept for crash reports.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import signal
import sys
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import psutil
import structlog

STDERR_TAIL_BYTES = 8192
_PR_SET_PDEATHSIG = 1
_log = structlog.get_logger(__name__)


def _child_setup() -> None:  # pragma: no cover - runs in the child between fork and exec
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


@dataclass(frozen=True, slots=True)
class ExitStatus:
    """How a child ended: ``exit_code`` for a normal exit, ``signal`` when killed."""

    exit_code: int | None
    signal: int | None

    @classmethod
    def from_returncode(cls, returncode: int) -> ExitStatus:
        return cls(exit_code=None, signal=-returncode) if returncode < 0 else cls(exit_code=returncode, signal=None)


def process_start_time(pid: int) -> float | None:
    """The kernel's start time of ``pid`` (defeats pid reuse when compared later)."""
    try:
        return float(psutil.Process(pid).create_time())
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None


def same_process_alive(pid: int | None, started_at: float | None, marker: str | None = None) -> bool:
    """Whether ``pid`` still runs and is the process we started: same start time
    (when known) and ``marker`` (e.g. a job id) on its command line."""
    if not pid:
        return False
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        if started_at is not None and abs(proc.create_time() - started_at) > 0.05:
            return False
        return marker is None or any(marker in part for part in proc.cmdline())
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


class ChildProcess:
    """A running worker. Create with :meth:`spawn`; ``wait()`` resolves on exit."""

    def __init__(self, proc: asyncio.subprocess.Process, name: str) -> None:
        self._proc = proc
        self.name = name
        self.pid = proc.pid
        self.started_at = process_start_time(proc.pid)
        self._stderr: deque[bytes] = deque()
        self._stderr_size = 0
        self._readers = [asyncio.create_task(self._drain_stderr()), asyncio.create_task(self._drain_stdout())]
        self._exit: asyncio.Task[ExitStatus] = asyncio.create_task(self._wait())

    @classmethod
    async def spawn(cls, argv: Sequence[str], *, name: str, env: Mapping[str, str] | None = None) -> ChildProcess:
        """Start ``argv`` in its own process group with stdin/stdout/stderr pipes."""
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=dict(env) if env is not None else None,
            start_new_session=True,
            preexec_fn=_child_setup,
        )
        child = cls(proc, name)
        _log.info("child_spawned", child=name, pid=child.pid)
        return child

    @property
    def returncode(self) -> int | None:
        return self._proc.returncode

    @property
    def alive(self) -> bool:
        return not self._exit.done()

    async def _drain_stdout(self) -> None:
        assert self._proc.stdout is not None
        while await self._proc.stdout.read(65536):
            pass

    async def _drain_stderr(self) -> None:
        assert self._proc.stderr is not None
        while True:
            chunk = await self._proc.stderr.read(65536)
            if not chunk:
                return
            self._stderr.append(chunk)
            self._stderr_size += len(chunk)
            while self._stderr_size - len(self._stderr[0]) >= STDERR_TAIL_BYTES:
                self._stderr_size -= len(self._stderr.popleft())

    def stderr_tail(self) -> str:
        """The last 8 KiB the child wrote to stderr."""
        return b"".join(self._stderr)[-STDERR_TAIL_BYTES:].decode("utf-8", "replace")

    async def _wait(self) -> ExitStatus:
        returncode = await self._proc.wait()
        # Let the readers collect the last stderr bytes before anyone reports them.
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.gather(*self._readers), 1.0)
        status = ExitStatus.from_returncode(returncode)
        _log.info("child_exited", child=self.name, pid=self.pid, exit_code=status.exit_code, signal=status.signal)
        return status

    async def wait(self) -> ExitStatus:
        return await asyncio.shield(self._exit)

    def send_line(self, line: str) -> None:
        """Write a command line to the child's stdin (ignored if it is gone)."""
        stdin = self._proc.stdin
        if stdin is None or stdin.is_closing():
            return
        with contextlib.suppress(OSError, RuntimeError):
            stdin.write(line.encode() + b"\n")

    def close_stdin(self) -> None:
        """EOF on the child's stdin: workers read it as "the service is going away"."""
        stdin = self._proc.stdin
        if stdin is not None and not stdin.is_closing():
            stdin.close()

    def signal_group(self, sig: int) -> None:
        """Signal the child's whole process group."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, sig)
