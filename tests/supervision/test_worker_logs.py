"""Every line a worker writes reaches the service's log with its identity and its own file.

Real child processes (``python -c``), real files under a temporary home; the
console is the ``forward`` seam :class:`WorkerLogs` takes (the service passes
the stdlib logger), so a test can see what was forwarded, and hold it to make a
flood certain.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
from pathlib import Path

from service.core.server_mode import ServerMode
from service.supervision.child_process import ChildProcess
from service.supervision.log_files import log_dir
from service.supervision.surroundings import LoggedSpawn
from service.supervision.worker_logs import WorkerLogs
from tests.eventually import eventually_async

SECRET = "hf_secretTOKEN1234"


class Seen:
    """What reached the console: ``(prefix, level, text)``, optionally held until released."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, int, str]] = []
        self.release = threading.Event()
        self.release.set()

    def __call__(self, prefix: str, level: int, text: str) -> None:
        self.release.wait(60)
        self.lines.append((prefix, level, text))


def _python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


async def test_stdout_and_stderr_reach_the_console_with_the_prefix_and_the_file(tmp_path: Path) -> None:
    """Both pipes, line by line; llama.cpp's info lines are the console's DEBUG, kept raw in the file."""
    seen = Seen()
    logs = WorkerLogs(tmp_path, secrets=[SECRET], forward=seen)
    llama = json.dumps({"event": "llama_cpp", "level": "info", "text": "print_info: n_layer = 18"})
    warn = json.dumps({"event": "disk_low", "level": "warning"})
    code = (
        "import sys\n"
        "print('plain stdout line')\n"
        f"print({llama!r}, file=sys.stderr)\n"
        f"print({warn!r}, file=sys.stderr)\n"
        f"print('token {SECRET} here', file=sys.stderr)\n"
        "sys.stdout.write('no newline at the end')\n"
    )
    spawn = LoggedSpawn(logs)
    child = await spawn(_python(code), name="inference:gemma:i-1")
    await child.wait()
    path = log_dir(tmp_path) / "instance-i-1.log"
    text = path.read_text()
    assert "plain stdout line" in text and "no newline at the end" in text
    assert "print_info: n_layer = 18\n" in text and '"llama_cpp"' not in text
    assert SECRET not in text and "token [redacted] here" in text
    by_text = {t: (who, level) for who, level, t in seen.lines}
    assert by_text["plain stdout line"] == ("[inference:gemma:i-1] ", logging.INFO)
    assert by_text["print_info: n_layer = 18"] == ("[inference:gemma:i-1] ", logging.DEBUG)
    assert by_text[warn] == ("[inference:gemma:i-1] ", logging.WARNING)
    assert all(SECRET not in t for _, _, t in seen.lines)
    logs.close()


async def test_the_service_log_shows_the_prefix_as_llama_cpps_router(tmp_path: Path, caplog: object) -> None:
    """The default forward: the stdlib logger ``modelrouter.worker``, ``[identity] line``."""
    import pytest

    assert isinstance(caplog, pytest.LogCaptureFixture)
    logs = WorkerLogs(tmp_path)
    with caplog.at_level(logging.INFO, logger="modelrouter.worker"):
        child = await LoggedSpawn(logs)(_python("print('hello from the worker')"), name="download:job-7")
        await child.wait()
    assert "[download:job-7] hello from the worker" in caplog.messages
    assert (log_dir(tmp_path) / "download-job-7.log").read_text() == "hello from the worker\n"
    logs.close()


async def test_single_model_mode_forwards_its_models_lines_bare_as_llama_server(tmp_path: Path) -> None:
    """In single-model mode the one model's worker prints as llama-server would, with no prefix; a
    download worker keeps its prefix (the decision: ``worker_log_prefix``, tested in tests/core)."""
    seen = Seen()
    logs = WorkerLogs(tmp_path, forward=seen)
    logs.mode = ServerMode("user/gemma:Q4_K_M")
    spawn = LoggedSpawn(logs)
    for name in ("inference:user/gemma:Q4_K_M:i-2", "download:job-3"):
        child = await spawn(_python(f"print('from {name}')"), name=name)
        await child.wait()
    assert ("", logging.INFO, "from inference:user/gemma:Q4_K_M:i-2") in seen.lines
    assert ("[download:job-3] ", logging.INFO, "from download:job-3") in seen.lines
    assert (log_dir(tmp_path) / "instance-i-2.log").read_text() == "from inference:user/gemma:Q4_K_M:i-2\n"
    logs.close()


async def test_a_flood_is_dropped_and_counted_without_blocking_the_worker(tmp_path: Path) -> None:
    """With the console held, a worker writing 20,000 lines still runs to its end: the reader drops
    what is past the bound and says how many; every line is either in the file or counted."""
    seen = Seen()
    seen.release.clear()
    logs = WorkerLogs(tmp_path, forward=seen, max_pending=100)
    total = 20_000
    code = f"import sys\nfor i in range({total}):\n    print('line', i)\nprint('done', file=sys.stderr)\n"
    stream = logs.stream("download:flood", "download", "flood")
    child = await ChildProcess.spawn(_python(code), name="download:flood", log=stream)
    # The worker finishes writing (its pipe never fills) while the console is still held.
    await eventually_async(lambda: stream.queued + stream.dropped >= total + 1, "every line read", timeout=60)
    assert stream.dropped > 0
    seen.release.set()
    await child.wait()
    lines = stream.path.read_text().splitlines()
    notices = [ln for ln in lines if ln.startswith("[modelrouter]")]
    assert notices and sum(int(n.split()[1]) for n in notices) == stream.dropped
    assert len(lines) - len(notices) + stream.dropped == total + 1
    logs.close()
