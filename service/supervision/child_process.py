"""One supervised child process: spawn, watch, stop. The only module that forks.

Every worker runs in its own process group (so a stop reaches any grandchild)
and treats EOF on stdin as "the service is gone"; each worker also asks for
``PR_SET_PDEATHSIG`` itself, right after exec, and re-checks its parent pid
(``workers/runtime/_parent_watch.py``). Its stdout and stderr are read line by
line into its :class:`~service.supervision.worker_logs.LogStream` (the service's
log and the worker's file); the crash report's tail is read back from that file.
A child spawned without a stream keeps the last 8 KiB of stderr in memory.

Why no ``preexec_fn``, and why a spawner thread: the service is threaded
(aiosqlite, ``asyncio.to_thread``, huggingface_hub's HTTP client). With a
``preexec_fn`` CPython runs the interpreter's at-fork hooks in the child, and
huggingface_hub's (``close_session``) could block on a lock that another
thread held at the moment of the fork, so the child never reached exec, while
the event loop sat inside ``Popen`` waiting for it: the whole service froze
(issue 11 §1.1). Now no Python code runs between fork and exec (only
``setsid`` and closing descriptors, done in C, and CPython may use ``vfork``),
and ``Popen`` runs on one long-lived spawner thread, so the event loop never
waits for a fork. The thread lives as long as the process because
``PR_SET_PDEATHSIG`` fires when the *thread* that forked a child exits.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import signal
import subprocess
from collections import deque
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import psutil
import structlog

from service.supervision.log_files import tail_lines
from service.supervision.worker_logs import LogStream

STDERR_TAIL_BYTES = 8192
MAX_LINE_BYTES = 64 * 1024
"""A longer line is cut there (a worker printing a huge blob must not grow the reader's buffer)."""
_log = structlog.get_logger(__name__)
_spawner: ThreadPoolExecutor | None = None


def _spawner_thread() -> ThreadPoolExecutor:
    # Created on first use, never shut down: see the module docstring.
    global _spawner
    if _spawner is None:
        _spawner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="spawner")
    return _spawner


@dataclass(frozen=True, slots=True)
class ExitStatus:
    """How a child ended: ``exit_code`` for a normal exit, ``signal`` when killed; its peak memory and
    whether the kernel's OOM killer acted meanwhile, when known (they explain a SIGKILL)."""

    exit_code: int | None
    signal: int | None
    max_rss_bytes: int | None = None
    oom_killed: bool | None = None

    @classmethod
    def from_returncode(
        cls, returncode: int, *, max_rss_bytes: int | None = None, oom_killed: bool | None = None
    ) -> ExitStatus:
        code, sig = (None, -returncode) if returncode < 0 else (returncode, None)
        return cls(exit_code=code, signal=sig, max_rss_bytes=max_rss_bytes, oom_killed=oom_killed)


def oom_kill_count() -> int | None:
    """The kernel's count of OOM kills since boot (``/proc/vmstat``, Linux 4.13+); None elsewhere."""
    try:
        with open("/proc/vmstat", "rb") as f:
            for line in f:
                if line.startswith(b"oom_kill "):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return None


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
        if marker is not None and not any(marker in part for part in proc.cmdline()):
            return False
        return started_at is None or same_start(proc.create_time(), started_at, whole_seconds_off=marker is not None)
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def same_start(now: float, recorded: float, *, whole_seconds_off: bool) -> bool:
    """Whether a process start time read now is the one ``recorded``. The kernel keeps a start in
    clock ticks since boot; psutil adds the boot time of ``/proc/stat``, whole seconds derived from
    the wall clock, so a clock correction (NTP, a VM's clock) moves every start by whole seconds
    between two reads. ``whole_seconds_off`` (when a marker already names the process) accepts
    that; without it the start itself must match."""
    off = now - recorded
    if abs(off) <= _START_TOLERANCE_S:
        return True
    return whole_seconds_off and abs(off - round(off)) <= _START_TOLERANCE_S


_START_TOLERANCE_S = 0.05
"""Two reads of one start differ by float rounding only; another process's start, by its own ticks."""


class ChildProcess:
    """A running worker. Create with :meth:`spawn`; ``wait()`` resolves on exit."""

    def __init__(self, popen: subprocess.Popen[bytes], name: str, log: LogStream | None = None) -> None:
        self._popen = popen
        self.name = name
        self.log = log
        self.pid = popen.pid
        self.started_at = process_start_time(popen.pid)
        self.max_rss_bytes: int | None = None  # known once reaped
        self._oom_kills_at_start = oom_kill_count()
        self._stderr: deque[bytes] = deque()
        self._stderr_size = 0
        self._stdin: asyncio.WriteTransport | None = None
        self._readers: list[asyncio.Task[None]] = []
        self._exit: asyncio.Task[ExitStatus] | None = None

    @classmethod
    async def spawn(
        cls, argv: Sequence[str], *, name: str, env: Mapping[str, str] | None = None, log: LogStream | None = None
    ) -> ChildProcess:
        """Start ``argv`` in its own session and process group, stdin, stdout and stderr
        piped, without blocking the event loop (see the module docstring); with ``log``,
        every line it writes goes there."""
        loop = asyncio.get_running_loop()

        def start() -> subprocess.Popen[bytes]:
            return subprocess.Popen(
                list(argv),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE if log is not None else subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                env=dict(env) if env is not None else None,
                start_new_session=True,
                close_fds=True,
            )

        popen = await loop.run_in_executor(_spawner_thread(), start)
        child = cls(popen, name, log)
        try:
            await child._attach(loop)
        except BaseException:
            # Never leave an unwatched process behind.
            child.signal_group(signal.SIGKILL)
            await loop.run_in_executor(None, popen.wait)
            raise
        _log.info("child_spawned", child=name, pid=child.pid)
        return child

    async def _attach(self, loop: asyncio.AbstractEventLoop) -> None:
        assert self._popen.stdin is not None and self._popen.stderr is not None
        self._stdin, _ = await loop.connect_write_pipe(asyncio.BaseProtocol, self._popen.stdin)
        pipes = [self._popen.stderr] if self.log is None else [self._popen.stderr, self._popen.stdout]
        for pipe in pipes:
            assert pipe is not None
            reader = asyncio.StreamReader(limit=1 << 20)
            await loop.connect_read_pipe(functools.partial(asyncio.StreamReaderProtocol, reader), pipe)
            drain = self._drain_stderr(reader) if self.log is None else self._forward_lines(reader, self.log)
            self._readers.append(asyncio.create_task(drain, name=f"output-{self.pid}"))
        self._exit = asyncio.create_task(self._wait(loop), name=f"wait-{self.pid}")

    @property
    def returncode(self) -> int | None:
        return self._popen.returncode

    @property
    def alive(self) -> bool:
        return self._exit is not None and not self._exit.done()

    async def _drain_stderr(self, reader: asyncio.StreamReader) -> None:
        while True:
            chunk = await reader.read(65536)
            if not chunk:
                return
            self._stderr.append(chunk)
            self._stderr_size += len(chunk)
            while self._stderr_size - len(self._stderr[0]) >= STDERR_TAIL_BYTES:
                self._stderr_size -= len(self._stderr.popleft())

    @staticmethod
    async def _forward_lines(reader: asyncio.StreamReader, log: LogStream) -> None:
        """Each line to ``log`` as soon as it is whole; never waits for the log (see LogStream.feed)."""
        partial = b""
        while True:
            chunk = await reader.read(65536)
            if not chunk:
                if partial:
                    log.feed(partial)
                return
            lines = (partial + chunk).split(b"\n")
            partial = lines.pop()
            for line in lines:
                log.feed(line[:MAX_LINE_BYTES])
            if len(partial) > MAX_LINE_BYTES:
                log.feed(partial[:MAX_LINE_BYTES])
                partial = b""

    def stderr_tail(self) -> str:
        """The last 8 KiB of what the child wrote: read from its log file (so the same tail is
        there after a restart of the service), or kept in memory when it has no log."""
        if self.log is None:
            return b"".join(self._stderr)[-STDERR_TAIL_BYTES:].decode("utf-8", "replace")
        return "\n".join(tail_lines(self.log.path, 200, max_bytes=STDERR_TAIL_BYTES))[-STDERR_TAIL_BYTES:]

    async def _reaped(self, loop: asyncio.AbstractEventLoop) -> int:
        """The exit status, collected without a thread per child: a pidfd becomes
        readable when the process exits (Linux 5.3+); elsewhere a thread waits."""
        try:
            pidfd = os.pidfd_open(self.pid)
        except (AttributeError, OSError):
            return await loop.run_in_executor(None, self._popen.wait)
        exited: asyncio.Future[None] = loop.create_future()

        def readable() -> None:
            if not exited.done():
                exited.set_result(None)

        loop.add_reader(pidfd, readable)
        try:
            await exited
        finally:
            loop.remove_reader(pidfd)
            os.close(pidfd)
        # wait4 for the peak memory (ru_maxrss, KiB on Linux); Popen is told the status it reaped.
        with contextlib.suppress(ChildProcessError):
            pid, status, usage = os.wait4(self.pid, os.WNOHANG)
            if pid == self.pid:
                self._popen.returncode = os.waitstatus_to_exitcode(status)
                self.max_rss_bytes = usage.ru_maxrss * 1024
        code = self._popen.poll()
        return code if code is not None else await loop.run_in_executor(None, self._popen.wait)

    async def _wait(self, loop: asyncio.AbstractEventLoop) -> ExitStatus:
        returncode = await self._reaped(loop)
        # Let the reader collect the last stderr bytes before anyone reports them.
        with contextlib.suppress(asyncio.TimeoutError):
            async with asyncio.timeout(1.0):  # not wait_for: on 3.11 it can swallow a cancellation
                await asyncio.gather(*self._readers)
        if self.log is not None:
            with contextlib.suppress(asyncio.TimeoutError):  # its lines reach the file before the tail is read
                async with asyncio.timeout(5.0):
                    await self.log.close()
        if self._stdin is not None:
            self._stdin.close()
        kills = oom_kill_count()
        oom = None if kills is None or self._oom_kills_at_start is None else kills > self._oom_kills_at_start
        status = ExitStatus.from_returncode(returncode, max_rss_bytes=self.max_rss_bytes, oom_killed=oom)
        _log.info("child_exited", child=self.name, pid=self.pid, exit_code=status.exit_code, signal=status.signal)
        return status

    async def wait(self) -> ExitStatus:
        assert self._exit is not None
        return await asyncio.shield(self._exit)

    def send_line(self, line: str) -> None:
        """Write a command line to the child's stdin (ignored if it is gone)."""
        stdin = self._stdin
        if stdin is None or stdin.is_closing():
            return
        with contextlib.suppress(OSError, RuntimeError):
            stdin.write(line.encode() + b"\n")

    def close_stdin(self) -> None:
        """EOF on the child's stdin: workers read it as "the service is going away"."""
        stdin = self._stdin
        if stdin is not None and not stdin.is_closing():
            stdin.close()

    def signal_group(self, sig: int) -> None:
        """Signal the child's whole process group."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, sig)
