"""The worker runtime: typed emit stamped and owned, the stdin line protocol, the redacting log."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devtools.hub_repos import make_repo
from devtools.hub_server import HubServer
from service.core import events as ev
from service.core.errors import InvalidEvent
from service.downloads.resolution import resolve
from service.event_store.sync_store import SyncEventStore
from tests.conftest_hub import REPO_ROOT, DownloadProc, download_command, unique_repo, worker_env
from workers.runtime import DOWNLOAD_WORKER, INFERENCE_WORKER, WorkerLog, WorkerRuntime, read_jsonl

TOKEN = "hf_secretTOKENvalue0123456789"


@pytest.fixture
def runtime(db_path: Path) -> Iterator[WorkerRuntime]:
    rt = WorkerRuntime.open(DOWNLOAD_WORKER, model="org/m-GGUF:Q8_0", owner_id="job-7", db=str(db_path), events=None)
    yield rt
    rt.close()


def _read(db_path: Path) -> list[ev.Recorded]:
    store = SyncEventStore(db_path, source={"kind": "test"})
    try:
        return store.read()
    finally:
        store.close()


class TestEmit:
    def test_an_event_is_stamped_with_the_model_and_the_workers_source(
        self, runtime: WorkerRuntime, db_path: Path
    ) -> None:
        progress = ev.DownloadProgress(job_id="job-7", bytes_done=1, bytes_total=2)
        runtime.emit(progress)
        (rec,) = _read(db_path)
        assert (rec.event, rec.model) == (progress, "org/m-GGUF:Q8_0")
        assert rec.source == {"kind": "download_worker", "job_id": "job-7", "pid": os.getpid()} == runtime.source

    def test_a_worker_writes_only_its_own_kind_of_event_about_its_own_job(
        self, runtime: WorkerRuntime, db_path: Path
    ) -> None:
        """House rule 3: the service decides (requested), the worker reports what it did, for its job."""
        requested = ev.DownloadRequested(job_id="job-7", repo="org/m-GGUF", commit="c" * 40, files=(), total_bytes=1)
        with pytest.raises(InvalidEvent, match="does not write download_requested"):
            runtime.emit(requested)
        with pytest.raises(InvalidEvent, match="job_id is not this worker's 'job-7'"):
            runtime.emit(ev.DownloadProgress(job_id="job-8", bytes_done=1, bytes_total=2))
        assert _read(db_path) == []

    def test_the_kinds_partition_the_worker_written_types(self) -> None:
        assert not DOWNLOAD_WORKER.events & INFERENCE_WORKER.events
        assert all(getattr(cls, "__dataclass_fields__", {}).get("job_id") for cls in DOWNLOAD_WORKER.events)
        assert all(getattr(cls, "__dataclass_fields__", {}).get("instance_id") for cls in INFERENCE_WORKER.events)

    def test_without_a_store_a_json_line_carries_the_stored_payload(self, tmp_path: Path) -> None:
        events = tmp_path / "events.jsonl"
        rt = WorkerRuntime.open(INFERENCE_WORKER, model="m", owner_id="i-1", db=None, events=str(events))
        stopped = ev.InstanceStopped(instance_id="i-1", reason="idle_ttl", exit_code=0)
        rt.emit(stopped)
        rt.close()
        assert read_jsonl(events) == [("instance_stopped", stopped.to_data())]
        assert ev.InstanceStopped.from_data(read_jsonl(events)[0][1]) == stopped


class TestLog:
    def _lines(self, write: Any) -> list[dict[str, Any]]:
        r, w = os.pipe()
        write(w)
        os.close(w)
        with os.fdopen(r, encoding="utf-8") as f:
            return [json.loads(line) for line in f]

    def test_a_secret_never_reaches_a_line_not_even_in_a_traceback(self) -> None:
        quoted = 'pa"ss\\word'

        def write(fd: int) -> None:
            log = WorkerLog(fd, secrets=[TOKEN, quoted, None]).bind(job_id="j")
            log.info("download_retry", error=f"GET /resolve?token={TOKEN} failed", extra={"nested": [quoted]})
            try:
                raise RuntimeError(f"upstream refused {TOKEN}")
            except RuntimeError:
                log.exception("worker_error")

        retry, error = self._lines(write)
        text = json.dumps([retry, error])
        assert TOKEN not in text and 'pa\\"ss' not in text and "[redacted]" in retry["error"]
        assert retry["extra"] == {"nested": ["[redacted]"]} and retry["job_id"] == "j"
        assert error["level"] == "error" and "RuntimeError: upstream refused [redacted]" in error["exception"]

    def test_lines_below_the_level_are_dropped(self) -> None:
        def write(fd: int) -> None:
            log = WorkerLog(fd, level="warning")
            log.info("hidden")
            log.warning("shown", n=1)

        (line,) = self._lines(write)
        assert (line["event"], line["level"], line["n"]) == ("shown", "warning", 1) and line["timestamp"].endswith("Z")


def _spawn_controlled(hub: HubServer, tmp_path: Path, name: str) -> tuple[DownloadProc, Path, str]:
    """A download worker run as the service runs it (--stdin-control, stdin a pipe), stalled at 30 %."""
    repo = unique_repo("ctl")
    info = make_repo(hub.root, repo, {"m-Q4_K_M.gguf": 2_000_000})
    hub.set_faults({"kind": "stall", "repo": repo, "at_fraction": 0.3, "seconds": 3600})
    cache, events, err = tmp_path / f"{name}-hub", tmp_path / f"{name}.jsonl", tmp_path / f"{name}.err"
    spec = resolve(repo, endpoint=hub.url).to_spec()
    cmd = download_command(spec, cache, events, name, "--stdin-control", "--stall-timeout", "3600")
    with err.open("wb") as errf:
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=errf,
            cwd=REPO_ROOT,
            env=worker_env(HF_TOKEN=TOKEN),
        )
    w = DownloadProc(proc, events, err, name)
    partial = cache / f"models--{repo.replace('/', '--')}" / "blobs" / f"{info.files[0].sha256}.incomplete"
    w.wait_until(lambda: partial.exists() and partial.stat().st_size >= 600_000, timeout=120, what="the stall")
    return w, partial, repo


class TestControl:
    @pytest.mark.timeout(300)
    def test_stdin_lines_cancel_and_unknown_ones_are_logged(self, hub: HubServer, tmp_path: Path) -> None:
        w, partial, _ = _spawn_controlled(hub, tmp_path, "lines")
        assert w.proc.stdin is not None
        w.proc.stdin.write(b"rewind please\nCANCEL discard\n")
        w.proc.stdin.flush()
        try:
            assert w.wait(120) == 2, w.stderr()
        finally:
            w.proc.stdin.close()
        assert w.types()[-1] == "download_cancelled" and w.of_type("download_cancelled")[0]["discarded"] is True
        assert not partial.exists()
        logged = [json.loads(line) for line in w.stderr().splitlines() if line.startswith("{")]
        unknown = [line for line in logged if line["event"] == "unknown_stdin_command"]
        assert [line["line"] for line in unknown] == ["rewind please"] and unknown[0]["job_id"] == "lines"
        assert TOKEN not in w.stderr()

    @pytest.mark.timeout(300)
    def test_stdin_eof_means_the_parent_died_so_nothing_is_recorded(self, hub: HubServer, tmp_path: Path) -> None:
        w, partial, _ = _spawn_controlled(hub, tmp_path, "eof")
        assert w.proc.stdin is not None
        w.proc.stdin.close()
        assert w.wait(120) == 3, w.stderr()
        assert w.types()[0] == "download_started" and set(w.types()) <= {"download_started", "download_progress"}
        assert partial.exists()  # kept for the service's resume
        assert '"event": "parent_exited"' in w.stderr()
