"""A stop always reaches a worker's blocked main thread, even when its signal lands
just before the thread blocks (``workers/runtime/_wakeup.py``: the lost-wakeup race).

Each test runs :mod:`tests.workers.runtime.signal_probe` as a real process, which
reproduces the race's aftermath deterministically: the signal's C handler has
run, the main thread sits in ``read(2)``, and no ``EINTR`` is coming. Without
the wake-up pipe (and, for downloads, the waker that re-signals the main
thread) only the probe's own fallback ends the read, after 30 s, and these
tests fail on ``released_by_helper``.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest_hub import REPO_ROOT, worker_env


def _probe(scenario: str) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-m", "tests.workers.runtime.signal_probe", scenario],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        env=worker_env(),
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report: dict[str, object] = json.loads(done.stdout.splitlines()[-1])
    assert "error" not in report, report
    return report


@pytest.mark.timeout(150)
def test_a_cancel_whose_signal_missed_the_blocked_read_still_interrupts_it() -> None:
    """The download worker: SIGTERM taken while the main thread was already blocked."""
    report = _probe("interrupts")
    assert report == {"released_by_helper": False, "outcome": "interrupted:cancel"}


@pytest.mark.timeout(150)
def test_a_signal_before_the_wait_still_wakes_the_waiting_main_thread() -> None:
    """The inference worker: a stop signal must end its wait on the wake-up pipe."""
    report = _probe("wakeup")
    assert report == {"released_by_helper": False, "outcome": "stopped"}
