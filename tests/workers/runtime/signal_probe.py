"""Run as a process: put a worker's main thread in the lost-wakeup state and report what ends its wait.

    python -m tests.workers.runtime.signal_probe interrupts|wakeup

The state, produced deterministically: the main thread is blocked in
``read(2)`` and a signal's C-level handler has *already run* -- without
interrupting that read. In production that is a signal landing in the
microseconds between the main thread's last bytecode and the system call
(``workers/runtime/_wakeup.py``); here the main thread blocks the signal and a helper
thread takes it on its own stack, once ``/proc`` shows the main thread asleep
in ``read`` on our pipe. CPython then has the Python handler pending, and
nothing wakes the main thread -- unless the mechanism under test does.

The helper gives up after :data:`GIVE_UP` seconds and releases the read
itself. It prints one JSON line: ``outcome`` (what ended the wait) and
``released_by_helper`` (True means the mechanism failed: only the helper's
fallback ended the wait).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time

from workers.download import Interrupted, Interrupts
from workers.runtime import Parent, Wakeup

GIVE_UP = 30.0


def _blocked_reading(tid: int, fd: int) -> bool:
    """Whether thread ``tid`` sleeps in a system call whose first argument is ``fd`` (our read)."""
    try:
        with open(f"/proc/self/task/{tid}/syscall") as f:
            fields = f.read().split()
        with open(f"/proc/self/task/{tid}/stat") as f:
            state = f.read().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state == "S" and len(fields) > 1 and fields[0] != "running" and int(fields[1], 16) == fd


def _helper(sig: int, tid: int, fd: int, release: int, done: threading.Event, report: dict[str, object]) -> None:
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {sig})  # inherited from the main thread, which refuses it
    deadline = time.monotonic() + GIVE_UP
    while not _blocked_reading(tid, fd):
        if time.monotonic() > deadline:
            report["error"] = "the main thread never blocked in its read"
            os.write(release, b"x")
            return
        time.sleep(0.001)
    signal.pthread_kill(threading.get_ident(), sig)  # the C handler runs here; the main thread's read goes on
    if not done.wait(GIVE_UP):
        report["released_by_helper"] = True
        os.write(release, b"x")


def _start_helper(sig: int, fd: int, release: int, done: threading.Event, report: dict[str, object]) -> None:
    signal.pthread_sigmask(signal.SIG_BLOCK, {sig})  # the kernel must give it to the helper
    args = (sig, threading.get_native_id(), fd, release, done, report)
    threading.Thread(target=_helper, args=args, daemon=True).start()


def probe_interrupts(report: dict[str, object]) -> None:
    """The download worker: SIGTERM (cancel) while its main thread waits in a blocking section."""
    interrupts = Interrupts(Parent())
    interrupts.install()
    r, w = os.pipe()
    done = threading.Event()
    _start_helper(signal.SIGTERM, r, w, done, report)
    try:
        with interrupts.blocking():
            os.read(r, 1)
        report["outcome"] = "read_returned"
    except Interrupted as stop:
        report["outcome"] = f"interrupted:{stop.kind}"
    done.set()


def probe_wakeup(report: dict[str, object]) -> None:
    """The inference worker: its main thread waits on the wake-up pipe for a stop flag a handler sets."""
    wakeup = Wakeup()
    wakeup.install()
    stop: list[int] = []
    signal.signal(signal.SIGUSR1, lambda signum, _frame: stop.append(signum))
    done = threading.Event()
    _start_helper(signal.SIGUSR1, wakeup.read_fd, wakeup.write_fd, done, report)
    while not stop:  # the inference worker's loop: check the flag, then wait
        wakeup.wait()
    report["outcome"] = "stopped" if stop else "no_stop"
    done.set()


def main() -> None:
    report: dict[str, object] = {"released_by_helper": False}
    {"interrupts": probe_interrupts, "wakeup": probe_wakeup}[sys.argv[1]](report)
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
