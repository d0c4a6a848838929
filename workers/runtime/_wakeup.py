"""A pipe that every handled signal writes to, whatever the main thread is doing.

The race it closes. CPython runs a Python signal handler in the main thread,
between bytecodes. A signal that arrives after the main thread last looked but
before it blocks in a system call (the microseconds of C code between
``sock.recv_into`` being called and ``poll(2)`` sleeping) interrupts nothing:
the handler runs only when that call returns -- for a stalled download after
the 30 s stall timeout, for the inference worker's wait on its wake pipe never.

``signal.set_wakeup_fd`` makes CPython's C-level handler write the signal
number into a pipe the instant the signal arrives, in whichever thread and
state. A thread (or the main thread's own wait, for the inference worker)
reading that pipe therefore never misses a signal, and can act on it: the
download worker's waker re-signals the main thread until the stop has been
raised there (:mod:`workers.download._interrupts`).
"""

from __future__ import annotations

import contextlib
import os
import signal

MANUAL = 0
"""The byte :meth:`Wakeup.wake` writes (no signal has number 0)."""


class Wakeup:
    """The wake-up pipe; :meth:`install` it once, from the main thread."""

    def __init__(self) -> None:
        # The write end must not block: a C signal handler writes to it.
        self.read_fd, self.write_fd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        os.set_blocking(self.read_fd, True)

    def install(self) -> None:
        """Route every Python-handled signal's number into the pipe (main thread only)."""
        # A full pipe already holds a pending wake-up: dropping a byte loses nothing.
        signal.set_wakeup_fd(self.write_fd, warn_on_full_buffer=False)

    def wake(self) -> None:
        """Wake the reader from any thread (not a signal: writes :data:`MANUAL`)."""
        with contextlib.suppress(BlockingIOError):
            os.write(self.write_fd, bytes([MANUAL]))

    def wait(self) -> bytes:
        """Block until something was written; the signal numbers (and :data:`MANUAL` bytes) since the last call."""
        return os.read(self.read_fd, 512)
