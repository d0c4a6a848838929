"""The log's own disk fills under a running service, on each backend, and then space comes back.

The disk is real: a small tmpfs the test mounts (:mod:`devtools.small_disk`; skipped, saying why,
where mounting is refused). SQLite keeps its file there; PostgreSQL keeps the ``events`` table in a
tablespace there, so its inserts fail with ``53100 disk_full`` ("could not extend file") while its
WAL and catalogues stay on the server's own disk, as on a server whose data volume filled.

"Full" means full for the log, not only for new files (:func:`devtools.small_disk.fill_log`).
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil
import pytest

from devtools.postgres_server import PostgresServer
from devtools.service_process import ServiceProcess
from devtools.small_disk import SmallDisk, fill_log
from service.recovery.migrate import upgrade
from tests.eventually import eventually
from tests.service_probes import events, inference_children, model_entry, still_running, wait_for_event
from tests.small_disks import mounted

CHAT = {"messages": [{"role": "user", "content": "hello"}], "max_tokens": 4}
_DISK_BYTES = 16 << 20


@dataclass
class FullLog:
    """The service's log on a small disk, and what a ``log_disk_full`` problem must name."""

    disk: SmallDisk
    url: str
    """``sqlite:///FILE`` or a ``postgresql://`` URL (for the writers and ``verify``)."""
    named: str
    """What a ``log_disk_full`` problem names: the file, or the database."""


@pytest.fixture(params=["sqlite", "postgresql"])
def full_log(request: pytest.FixtureRequest) -> Iterator[FullLog]:
    """A migrated log on a small disk of its own, on each backend."""
    if request.param == "sqlite":
        for disk in mounted(_DISK_BYTES):
            db = disk.root / "modelrouter.db"
            upgrade(db)
            yield FullLog(disk, f"sqlite:///{db}", str(db))
        return
    server: PostgresServer = request.getfixturevalue("pg_server")
    url: str = request.getfixturevalue("pg_url")
    database = url.rsplit("/", 1)[1]
    for disk in mounted(_DISK_BYTES, owner=server.user):
        space = f"full_{database}"
        server.psql(f"CREATE TABLESPACE {space} LOCATION '{disk.root}'")
        try:
            server.psql(f"ALTER TABLE events SET TABLESPACE {space}", database)
            yield FullLog(disk, url, f"/{database}")
        finally:
            server.psql(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")
            server.psql(f"DROP TABLESPACE IF EXISTS {space}")


def _chat(svc: ServiceProcess, model: str) -> httpx.Response:
    return httpx.post(f"{svc.url}/v1/chat/completions", json={"model": model, **CHAT}, timeout=60)


def _serving_tiny_a(log: FullLog, models_dir: Path, home: Path) -> ServiceProcess:
    """The real service on ``log``, with tiny-a loaded."""
    env = {"MODELROUTER_MODELS_DIR": str(models_dir), "MODELROUTER_DATABASE_URL": log.url}
    svc = ServiceProcess(home, env=env).start()
    try:
        assert httpx.post(f"{svc.url}/models/load", json={"model": "tiny-a"}, timeout=30).status_code == 200
        eventually(lambda: model_entry(svc, "tiny-a")["status"]["value"] == "loaded", "tiny-a loaded", timeout=90)
    except BaseException:
        svc.stop()
        raise
    return svc


def _worker_of_tiny_a(svc: ServiceProcess) -> tuple[psutil.Process, str]:
    """tiny-a's one inference worker process and its instance id."""
    (worker,) = inference_children(svc)
    return worker, model_entry(svc, "tiny-a")["status"]["instance"]["instance_id"]


def _verify(log: FullLog, home: Path) -> None:
    verified = subprocess.run(
        [sys.executable, "-m", "service.cli", "verify", "--database-url", log.url, "--home", str(home)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert verified.returncode == 0, verified.stdout + verified.stderr


@pytest.mark.timeout(240)
def test_a_full_log_disk_refuses_writes_clearly_keeps_reads_and_recovers(
    full_log: FullLog, models_dir: Path, tmp_path: Path
) -> None:
    svc = _serving_tiny_a(full_log, models_dir, tmp_path / "home")
    try:
        refusal = fill_log(full_log.disk, full_log.url)
        assert full_log.named in str(refusal) and "disk is full" in str(refusal), refusal  # the writers' own

        # A write: 507 with the reason and the file or database, never a 500.
        refused = httpx.post(f"{svc.url}/models/load", json={"model": "tiny-b"}, timeout=30)
        assert refused.status_code == 507, refused.text
        problem = refused.json()
        assert problem["type"] == "/problems/log_disk_full", problem
        assert "disk is full" in problem["detail"] and full_log.named in problem["detail"], problem
        assert full_log.named in problem["location"], problem
        # The same refusal in the APIs that have no 507 (OpenAI's, Ollama's): a 503 saying why.
        openai = _chat(svc, "tiny-b")
        assert openai.status_code == 503, openai.text
        assert openai.json()["type"] == "/problems/log_disk_full"
        assert "disk is full" in openai.json()["error"]["message"], openai.json()
        ollama = httpx.post(f"{svc.url}/api/chat", json={"model": "tiny-b", **CHAT, "stream": False}, timeout=30)
        assert ollama.status_code == 503 and "disk is full" in ollama.json()["error"], ollama.text

        health = httpx.get(f"{svc.url}/health", timeout=10)
        assert health.status_code == 503, health.text
        assert any("cannot be written" in w and full_log.named in w for w in health.json()["warnings"]), health.json()

        # Reads are still served: the fold, the log, and a model that is loaded.
        assert model_entry(svc, "tiny-a")["status"]["value"] == "loaded"
        assert httpx.get(f"{svc.url}/events", params={"type": "instance_ready"}, timeout=10).json()["events"]
        served = _chat(svc, "tiny-a")
        assert served.status_code == 200, served.text
        assert served.json()["choices"][0]["message"]["role"] == "assistant"

        full_log.disk.free()
        # /health records the outage's end itself: no other write is needed to clear it.
        eventually(lambda: httpx.get(f"{svc.url}/health", timeout=10).status_code == 200, "/health 200", timeout=30)
        (resumed,) = events(svc, type="log_writes_resumed")
        assert resumed["data"]["refused"] >= 3 and full_log.named in resumed["data"]["location"], resumed
        assert httpx.post(f"{svc.url}/models/load", json={"model": "tiny-b"}, timeout=30).status_code == 200
        wait_for_event(svc, "instance_ready", model="tiny-b", timeout=90)
    finally:
        svc.stop()
    _verify(full_log, svc.home)


@pytest.mark.timeout(240)
def test_a_service_stopped_while_its_log_disk_is_full_exits_cleanly_and_the_next_start_reconciles(
    full_log: FullLog, models_dir: Path, tmp_path: Path
) -> None:
    svc = _serving_tiny_a(full_log, models_dir, tmp_path / "home")
    worker, instance = _worker_of_tiny_a(svc)
    fill_log(full_log.disk, full_log.url)
    assert svc.stop(60) in (0, -signal.SIGTERM)
    log = svc.log_text()
    assert "shutdown_not_recorded" in log and "Application shutdown complete" in log, log[-3000:]
    assert still_running([worker], timeout=30) == [], "the worker ends with the service"

    full_log.disk.free()
    again = ServiceProcess(tmp_path / "home", env=svc.env).start()
    try:
        (lost,) = events(again, type="instance_lost")
        assert lost["data"]["instance_id"] == instance, lost
    finally:
        again.stop()
    _verify(full_log, svc.home)


@pytest.mark.timeout(240)
def test_a_worker_that_dies_while_the_log_disk_is_full_has_its_end_recorded_once_space_returns(
    full_log: FullLog, models_dir: Path, tmp_path: Path
) -> None:
    svc = _serving_tiny_a(full_log, models_dir, tmp_path / "home")
    try:
        worker, instance = _worker_of_tiny_a(svc)
        fill_log(full_log.disk, full_log.url)
        worker.send_signal(signal.SIGKILL)
        eventually(lambda: "decision_not_recorded_yet" in svc.log_text(), "the exit's record retried", timeout=60)
        assert not events(svc, type="instance_crashed"), "nothing can land while the disk is full"

        full_log.disk.free()
        crashed = wait_for_event(svc, "instance_crashed", model="tiny-a", timeout=60)
        assert crashed["data"]["instance_id"] == instance and crashed["data"]["signal"] == signal.SIGKILL, crashed
        eventually(lambda: model_entry(svc, "tiny-a")["status"]["value"] != "loaded", "tiny-a not loaded", timeout=30)
        served = _chat(svc, "tiny-a")  # a new worker
        assert served.status_code == 200, served.text
        assert [p.pid for p in inference_children(svc)] != [worker.pid]
    finally:
        svc.stop()
    _verify(full_log, svc.home)
