"""Cancellation and parent-death handling for the download worker.

Signals (the control channel when run by hand or in tests):

* ``SIGTERM`` / ``SIGINT``: cancel, keep partial files for a later resume.
* ``SIGUSR1``: cancel and delete this job's partial files.
* ``SIGTERM`` from ``PR_SET_PDEATHSIG``, or EOF on a piped stdin: the parent
  (the service) is gone; stop at once, keep partials, emit nothing. Under
  ``--stdin-control`` (how the service runs us: it cancels with stdin lines)
  every SIGTERM means this, because PDEATHSIG fires when the *thread* that
  forked us dies, which during a SIGKILL of the service can come before we are
  reparented, so ``getppid()`` cannot tell.

Stdin lines (``--stdin-control``, served by the runtime): ``cancel``,
``cancel discard`` (``stop`` is an alias of ``cancel``).

How a cancel interrupts a blocked read: the handler *raises*
:class:`Interrupted` when the main thread is inside a :meth:`Interrupts.blocking`
section (network waits, backoff sleeps). CPython runs handlers in the main
thread and a raising handler aborts the blocked ``recv``/``sleep`` (PEP 475),
so a cancel during a 30 s stall takes effect in milliseconds. Outside those
sections (writing, hashing, emitting events) the request is only recorded and
:meth:`check` raises at the next safe point, so a chunk is never half-applied.

Why a signal can never be lost before a blocked read: a signal that lands
after the main thread last ran bytecode but before its ``poll(2)`` sleeps
interrupts nothing (see :mod:`workers.runtime._wakeup`). So every handled signal also
lands in a wake-up pipe, and a *waker* thread reading it re-signals the main
thread (``SIGUSR2``, every :data:`RESIGNAL_SECONDS`) from the moment a stop is
requested until it has been raised there. One of those signals finds the main
thread inside its blocked call and ends it.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from workers.runtime import MAIN_THREAD_SIGNALS, Parent, Wakeup

CANCEL = "cancel"
DISCARD = "discard"
PARENT = "parent"
_PRIORITY = {CANCEL: 1, DISCARD: 2, PARENT: 3}
_WAKE = signal.SIGUSR2  # sent to the main thread to deliver a stop request there
RESIGNAL_SECONDS = 0.02


class Interrupted(BaseException):
    """Raised in the main thread when the job must stop; ``kind`` is cancel, discard or parent.

    A BaseException so that ``except Exception`` in library code cannot swallow it.
    """

    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind


class Interrupts:
    """Collects stop requests and turns them into :class:`Interrupted` at safe points."""

    def __init__(self, parent: Parent | None = None) -> None:
        self.parent = parent or Parent()
        self.requested: str | None = None
        self.stdin_control = False
        self._interruptible = False
        self._raised = False  # an Interrupted reached the main thread: stop re-signalling
        self._main = threading.main_thread().ident
        self._wakeup: Wakeup | None = None

    def install(self) -> None:
        """Install the signal handlers, the wake-up pipe and its waker thread (main thread only)."""
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, _WAKE):
            signal.signal(sig, self._on_signal)
        self._wakeup = Wakeup()
        self._wakeup.install()
        threading.Thread(target=self._run_waker, name="interrupt-waker", daemon=True).start()

    def request(self, kind: str) -> None:
        """Record a stop request; the strongest one wins (parent > discard > cancel)."""
        if self.requested is None or _PRIORITY[kind] > _PRIORITY[self.requested]:
            self.requested = kind

    def check(self) -> None:
        """Raise :class:`Interrupted` if a stop was requested."""
        if self.requested is not None:
            self._raise()

    @contextmanager
    def blocking(self) -> Iterator[None]:
        """Mark a section that may be aborted by a signal at any instant."""
        # Interruptible first, then check: a request recorded in between is
        # then raised by the handler or by this check, never by neither.
        self._interruptible = True
        try:
            self.check()
            yield
        finally:
            self._interruptible = False

    # --- stdin channel (the runtime's stdin thread) -------------------

    def on_cancel(self, argument: str) -> None:
        """``cancel [discard]`` (and its alias ``stop``)."""
        self.request(DISCARD if "discard" in argument.lower().split() else CANCEL)
        self._wake()

    def on_stdin_eof(self) -> None:
        self.request(PARENT)
        self._wake()

    def _wake(self) -> None:
        # Only the main thread can raise into its blocked read: the waker signals it.
        if self._wakeup is not None:
            self._wakeup.wake()

    # --- signals ------------------------------------------------------

    def _kind_of(self, signum: int) -> str | None:
        if signum == signal.SIGUSR1:
            return DISCARD
        if signum in (signal.SIGTERM, signal.SIGINT):
            # PDEATHSIG also arrives as SIGTERM (see the module docstring).
            return PARENT if self.stdin_control or self.parent.gone() else CANCEL
        return None  # _WAKE: delivers a request recorded elsewhere

    def _on_signal(self, signum: int, frame: object) -> None:
        kind = self._kind_of(signum)
        if kind is not None:
            self.request(kind)
        if self._interruptible and self.requested is not None:
            self._raise()

    def _raise(self) -> None:
        self._interruptible = False  # a second signal must not raise inside cleanup
        self._raised = True
        raise Interrupted(self.requested or CANCEL)

    def _run_waker(self) -> None:
        signal.pthread_sigmask(signal.SIG_BLOCK, MAIN_THREAD_SIGNALS)
        assert self._wakeup is not None and self._main is not None
        while True:
            for signum in self._wakeup.wait():
                kind = self._kind_of(signum)
                if kind is not None:
                    self.request(kind)  # what the handler will do, done before it can run
            while self.requested is not None and not self._raised:
                signal.pthread_kill(self._main, _WAKE)
                time.sleep(RESIGNAL_SECONDS)
