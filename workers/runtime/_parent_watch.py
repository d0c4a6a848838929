"""Make a worker process die with the service that spawned it.

Why: an orphaned inference worker keeps gigabytes of RAM and a port, an
orphaned download keeps a lock on its blobs. Two independent mechanisms,
because each has a blind spot:

* ``PR_SET_PDEATHSIG`` (Linux): the kernel signals us when the parent
  *thread* that forked us exits -- instant, but it also fires if the service
  spawned us from a short-lived thread, and it is lost if the parent died
  before we called ``prctl`` (hence the ``getppid`` re-check).
* stdin EOF: the service holds the write end of our stdin pipe; when the
  service process dies (even by SIGKILL) the kernel closes it and our reader
  thread sees EOF. The same pipe carries each worker's line protocol
  (:meth:`workers.runtime._worker_runtime.WorkerRuntime.control`).

:class:`Parent` holds both; what a worker *does* when its parent dies is its
own (the download worker turns it into :data:`workers.download._interrupts.PARENT`, the
inference worker into a stop with exit code 4).
"""

from __future__ import annotations

import ctypes
import os
import signal
import stat
import sys
import threading
from collections.abc import Callable

PR_SET_PDEATHSIG = 1
MAIN_THREAD_SIGNALS = frozenset({signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGUSR2})
"""The signals workers handle; their helper threads block them, so the kernel delivers them to the main thread."""


class Parent:
    """The process that spawned this worker, and whether it is gone.

    Create it first thing in ``main``: ``getppid()`` read after slow imports
    may already name init if the service died meanwhile.
    """

    def __init__(self, pid: int | None = None) -> None:
        self.pid = pid if pid is not None else os.getppid()
        self.stdin_closed = False  # set by the stdin watcher at EOF

    def gone(self) -> bool:
        """Whether the service died: its end of our stdin closed, or we were reparented."""
        return self.stdin_closed or os.getppid() != self.pid

    def die_with(self, sig: int = signal.SIGTERM) -> bool:
        """Ask for ``sig`` when the parent dies; False if it is already gone (then exit)."""
        return set_parent_death_signal(sig, expected_ppid=self.pid)

    def watch_stdin(self, on_line: Callable[[str], None], on_eof: Callable[[], None]) -> bool:
        """Feed stdin lines to ``on_line`` on a thread and call ``on_eof`` at EOF, when stdin is
        watchable (:func:`stdin_is_watchable`); returns whether it is watched."""
        if not stdin_is_watchable():
            return False

        def eof() -> None:
            self.stdin_closed = True
            on_eof()

        watch_stdin(on_line, eof)
        return True


def set_parent_death_signal(sig: int = signal.SIGTERM, *, expected_ppid: int | None = None) -> bool:
    """Ask the kernel to send ``sig`` when our parent dies; Linux only.

    Returns False if the parent is already gone (our ppid is no longer
    ``expected_ppid``) -- the caller should then exit. True where unsupported.
    """
    if expected_ppid is None:
        expected_ppid = os.getppid()
    if not sys.platform.startswith("linux"):
        return True
    try:
        # CDLL(None): the symbols already loaded, libc's prctl among them.
        # ctypes.util.find_library("c") would fork /sbin/ldconfig at every worker start.
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
            return True  # not fatal: the stdin watch still covers us
    except OSError:
        return True
    # The parent may have died between fork and prctl: then we were reparented.
    return os.getppid() == expected_ppid


def stdin_is_watchable() -> bool:
    """True if stdin is a pipe or socket -- i.e. a supervisor holds its other end.

    A TTY, /dev/null or a regular file is not watched: EOF there says nothing
    about the parent, and reading a TTY from the background would stop us.
    """
    try:
        mode = os.fstat(0).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


def watch_stdin(on_line: Callable[[str], None], on_eof: Callable[[], None]) -> threading.Thread:
    """Start a daemon thread that feeds stdin lines to ``on_line``, then calls ``on_eof``."""

    def run() -> None:
        # Signals belong to the main thread: only there can a handler cut a
        # blocked call short (see workers.runtime._wakeup).
        signal.pthread_sigmask(signal.SIG_BLOCK, MAIN_THREAD_SIGNALS)
        stream = os.fdopen(os.dup(0), "rb", buffering=0)
        buf = b""
        try:
            while True:
                chunk = stream.read(4096)
                if not chunk:
                    break
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    text = line.decode("utf-8", errors="replace").strip()
                    if text:
                        on_line(text)
        except OSError:
            pass
        finally:
            stream.close()
        on_eof()

    thread = threading.Thread(target=run, name="stdin-watch", daemon=True)
    thread.start()
    return thread
