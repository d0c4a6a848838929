"""One supervised child process (:mod:`service.supervision.child_process`), with real processes
(``python -c``): how it ended, its stdin, its process group, its stderr tail, and whether a pid is
still the process that was started."""

from __future__ import annotations

import os
import re
import signal
import sys
from pathlib import Path

from service.supervision.child_process import (
    STDERR_TAIL_BYTES,
    ChildProcess,
    ExitStatus,
    process_start_time,
    same_process_alive,
    same_start,
)
from service.supervision.log_files import tail_lines
from service.supervision.worker_logs import WorkerLogs
from tests.eventually import eventually_async
from tests.supervision.test_worker_logs import Seen

WAIT = 60.0  # seconds: a python start on two busy cores


def _python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


async def test_the_crash_tail_is_read_from_the_file_after_a_sigkill(tmp_path: Path) -> None:
    """A killed worker's last lines: in the file, and the tail the crash report gets comes from it."""
    logs = WorkerLogs(tmp_path, forward=Seen())
    code = "import sys, time\nprint('loading tensors', file=sys.stderr, flush=True)\ntime.sleep(120)\n"
    child = await ChildProcess.spawn(_python(code), name="inference:m:i-9", log=logs.stream("x", "instance", "i-9"))
    path = logs.path("instance", "i-9")
    await eventually_async(
        lambda: path.exists() and "loading tensors" in path.read_text(), "the line in the file", timeout=60
    )
    child.signal_group(signal.SIGKILL)
    status = await child.wait()
    assert status.signal == signal.SIGKILL
    assert child.stderr_tail().strip() == "loading tensors"
    assert tail_lines(path, 5) == ["loading tensors"]  # what a restarted service reads back
    logs.close()


async def test_an_exit_code_and_a_signal_are_told_apart_with_the_peak_memory() -> None:
    exited = await ChildProcess.spawn(_python("raise SystemExit(3)"), name="t:exit")
    status = await exited.wait()
    assert (status.exit_code, status.signal) == (3, None) and not exited.alive
    assert status.max_rss_bytes is not None and status.max_rss_bytes > 0  # wait4's ru_maxrss
    killed = await ChildProcess.spawn(_python("import time\ntime.sleep(120)"), name="t:kill")
    assert killed.alive
    killed.signal_group(signal.SIGTERM)
    assert (await killed.wait()).signal == signal.SIGTERM
    assert (await killed.wait()).exit_code is None  # wait() answers again, the same


def test_a_negative_return_code_is_the_signal_that_ended_it() -> None:
    assert ExitStatus.from_returncode(-9) == ExitStatus(exit_code=None, signal=9)
    assert ExitStatus.from_returncode(0) == ExitStatus(exit_code=0, signal=None)


async def test_lines_on_stdin_reach_the_child_and_eof_ends_it() -> None:
    code = (
        "import sys\n"
        "for line in sys.stdin:\n"
        "    print('got', line.strip(), file=sys.stderr, flush=True)\n"
        "print('eof', file=sys.stderr, flush=True)\n"
    )
    child = await ChildProcess.spawn(_python(code), name="t:stdin")
    child.send_line("cancel discard")
    await eventually_async(lambda: "got cancel discard" in child.stderr_tail(), "the line read", timeout=WAIT)
    child.close_stdin()
    status = await child.wait()
    assert status.exit_code == 0 and child.stderr_tail().split() == ["got", "cancel", "discard", "eof"]
    child.send_line("late")  # the child is gone: ignored, not raised
    child.close_stdin()


async def test_a_signal_reaches_the_whole_process_group() -> None:
    """A worker's own children (llama.cpp's threads are not, but a shell wrapper's are) stop with it."""
    code = (
        "import subprocess, sys, time\n"
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
        "print('grandchild', p.pid, file=sys.stderr, flush=True)\n"
        "time.sleep(120)\n"
    )
    child = await ChildProcess.spawn(_python(code), name="t:group")
    line = re.compile(r"grandchild (\d+)\n")  # the whole line: stderr may arrive in pieces
    await eventually_async(lambda: line.search(child.stderr_tail()) is not None, "the grandchild started", timeout=WAIT)
    found = line.search(child.stderr_tail())
    assert found is not None
    grandchild = int(found.group(1))
    assert os.getpgid(grandchild) == child.pid  # its own group, led by the child
    child.signal_group(signal.SIGKILL)
    assert (await child.wait()).signal == signal.SIGKILL
    await eventually_async(lambda: _gone(grandchild) or _zombie(grandchild), "the grandchild killed", timeout=WAIT)


def _zombie(pid: int) -> bool:
    """Killed, waiting for init to reap it (its parent died first)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1].startswith("Z")
    except OSError:
        return True


async def test_without_a_log_only_the_last_8_kib_of_stderr_are_kept() -> None:
    code = "import sys\nsys.stderr.write('x' * 100_000)\nsys.stderr.write('THE END')\n"
    child = await ChildProcess.spawn(_python(code), name="t:tail")
    await child.wait()
    tail = child.stderr_tail()
    assert len(tail) == STDERR_TAIL_BYTES and tail.endswith("xTHE END")


async def test_a_live_child_is_itself_until_reaped_and_a_pid_is_checked_by_start_time_and_marker() -> None:
    child = await ChildProcess.spawn(_python("import sys\nsys.stdin.read()"), name="t:alive")
    started = process_start_time(child.pid)
    assert started is not None and child.started_at == started
    assert same_process_alive(child.pid, started, marker="sys.stdin.read()")
    assert not same_process_alive(child.pid, started, marker="job-somebody-else")
    assert not same_process_alive(child.pid, started - 10.0)  # a reused pid: another start time
    # A wall-clock correction moves psutil's boot time, and so every start, by whole seconds: with
    # the marker on its command line the process is still itself; a start off by a fraction is not.
    assert same_process_alive(child.pid, started - 1.0, marker="sys.stdin.read()")
    assert not same_process_alive(child.pid, started - 1.5, marker="sys.stdin.read()")
    assert not same_process_alive(None, None)
    child.close_stdin()
    await child.wait()
    assert not same_process_alive(child.pid, started)
    assert process_start_time(child.pid) is None or process_start_time(child.pid) != started


def test_a_start_moved_by_whole_seconds_is_the_same_start_only_where_a_marker_names_the_process() -> None:
    assert same_start(100.01, 100.0, whole_seconds_off=False)
    assert not same_start(101.0, 100.0, whole_seconds_off=False)
    assert same_start(101.0, 100.0, whole_seconds_off=True) and same_start(97.02, 100.0, whole_seconds_off=True)
    assert not same_start(100.5, 100.0, whole_seconds_off=True)
