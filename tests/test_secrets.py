"""Secrets (the Hub token, API keys, the workers' secrets) never appear in logs, events or error bodies
(issue 11 §1.4: an unhandled-exception log dumped frame locals, and with them
``Settings(hf_token=...)``, four times)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import httpx
import psutil

from devtools.hub_repos import make_repo
from devtools.hub_server import HubServer
from devtools.service_process import ServiceProcess, worker_headers
from devtools.tiny_gguf import write_tiny_gguf
from service.core import worker_key
from service.settings import Settings
from tests.conftest_hub import unique_repo
from tests.eventually import eventually
from tests.service_probes import wait_for_event

TOKEN = "hf_secretTOKENvalue0123456789"
ROOT = Path(__file__).resolve().parents[1]


def test_settings_repr_redacts_the_token() -> None:
    shown = repr(Settings(hf_token=TOKEN))
    assert TOKEN not in shown and "hf_token='[redacted]'" in shown
    assert "hf_token=None" in repr(Settings())


def test_an_exception_log_carries_no_frame_locals_and_no_secret() -> None:
    """The traceback of a frame holding Settings, and a message quoting the token."""
    script = textwrap.dedent(f"""
        import structlog
        from service.outside.logging_config import configure_logging
        from service.settings import Settings

        configure_logging(json=True, secrets=[{TOKEN!r}])
        log = structlog.get_logger("t")

        def handler(settings):
            token_copy = settings.hf_token
            raise RuntimeError("upstream refused " + token_copy)

        try:
            handler(Settings(hf_token={TOKEN!r}))
        except RuntimeError:
            log.exception("unhandled_exception", detail="token was " + {TOKEN!r})
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "unhandled_exception" in done.stderr and "RuntimeError" in done.stderr
    assert TOKEN not in done.stderr
    assert "[redacted]" in done.stderr
    assert '"locals"' not in done.stderr


def test_the_service_never_logs_or_records_the_token(hub: HubServer, tmp_path: Path) -> None:
    gated = unique_repo("secret")
    make_repo(hub.root, gated, {"m-Q4_K_M.gguf": 4096}, gated=True, token=TOKEN)
    svc = ServiceProcess(tmp_path / "home", env={"HF_ENDPOINT": hub.url, "HF_TOKEN": TOKEN})
    svc.start()
    bodies = []
    try:
        with httpx.Client(base_url=svc.url, timeout=60) as client:
            started = client.post("/models", json={"model": gated})  # uses the token
            bodies.append(started.text)
            bodies.append(client.post("/models", json={"model": "nobody/missing-GGUF"}).text)
            bodies.append(client.post("/models", json={"model": "bad name!"}).text)
            bodies.append(client.get("/events", params={"limit": 1000}).text)
            bodies.append(client.get("/health").text)
            job_id = started.json()["job_id"]  # the worker's log, read back through the API
            eventually(lambda: client.get(f"/downloads/{job_id}/logs").status_code == 200, "the job's log")
            bodies.append(client.get(f"/downloads/{job_id}/logs", params={"tail": 10000}).text)
    finally:
        svc.stop()
    assert TOKEN not in svc.log_text()
    for body in bodies:
        assert TOKEN not in body
    worker_logs = list((svc.home / "logs" / "workers").glob("download-*.log*"))
    assert worker_logs  # the download worker's lines were kept (docs/operations.md, workers' logs)
    for kept in worker_logs:
        assert TOKEN not in kept.read_text(errors="replace")


def test_a_workers_secret_is_in_no_command_line_log_event_or_answer(tmp_path: Path) -> None:
    """Issue 34: each inference worker's secret travels in its environment only: ``ps`` and
    ``/proc/PID/cmdline`` never show it, and neither do the service's log, the worker's, nor ``/events``."""
    models = tmp_path / "models"
    models.mkdir()
    write_tiny_gguf(models / "tiny.gguf")
    svc = ServiceProcess(tmp_path / "home", env={"MODELROUTER_MODELS_DIR": str(models)})
    svc.start()
    try:
        with httpx.Client(base_url=svc.url, timeout=60) as client:
            client.post("/models/load", json={"model": "tiny"}).raise_for_status()
            ready = wait_for_event(svc, "instance_ready", model="tiny", timeout=60)["data"]
            secret = worker_headers(ready["pid"])[worker_key.HEADER]  # what the service gave it
            chat = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
            bodies = [client.post("/v1/chat/completions", json=chat).text]
            bodies.append(client.get("/props", params={"model": "tiny"}).text)
            bodies.append(client.get("/events", params={"limit": 1000}).text)
            bodies.append(client.get("/models").text)
            listed = subprocess.run(["ps", "-eww", "-o", "pid,args"], capture_output=True, text=True, check=True)
            cmdlines = [Path(f"/proc/{pid}/cmdline").read_bytes() for pid in (svc.pid, ready["pid"])]
            assert b"workers.inference" in cmdlines[1]
            client.post("/models/unload", json={"model": "tiny"}).raise_for_status()
    finally:
        svc.stop()
    assert len(secret) >= 43 and str(ready["pid"]) in listed.stdout
    assert secret not in listed.stdout and all(secret.encode() not in line for line in cmdlines)
    assert secret not in svc.log_text() and all(secret not in body for body in bodies)
    worker_logs = list((svc.home / "logs" / "workers").glob("instance-*.log*"))
    assert worker_logs and all(secret not in kept.read_text(errors="replace") for kept in worker_logs)


def test_a_named_keys_secret_is_never_logged_recorded_or_shown(tmp_path: Path) -> None:
    """Issue 34: the secret ``POST /keys`` answers once is nowhere else: not in the service's log,
    the events (``GET /events``, the database's files), nor any process's command line."""
    full = tmp_path / "full-key.txt"
    full.write_text("sk-full-0123456789\n")
    svc = ServiceProcess(tmp_path / "home", args=["--api-key-file", str(full)])
    svc.start()
    admin = {"Authorization": "Bearer sk-full-0123456789"}
    try:
        with httpx.Client(base_url=svc.url, timeout=60) as client:
            made = client.post("/keys", json={"name": "ops", "endpoints": ["inference", "admin"]}, headers=admin)
            secret = made.json()["secret"]
            mine = {"Authorization": f"Bearer {secret}"}
            bodies = [client.get("/v1/models", headers=mine).text]
            bodies.append(client.get("/v1/models", headers={"Authorization": f"Bearer {secret}x"}).text)  # a 401
            bodies.append(client.post("/v1/chat/completions", json={"model": "nope"}, headers=mine).text)
            with client.stream("GET", "/events/stream", params={"api_key": secret, "after": 0}) as stream:
                assert stream.status_code == 200  # a key in the URL, as EventSource sends it
            client.patch("/keys/ops", json={"rpm": 5}, headers=admin)
            bodies.append(client.get("/keys", headers=admin).text)
            events = client.get("/events", params={"limit": 1000}, headers=admin).json()["events"]
            assert {"key_created", "key_changed"} <= {e["type"] for e in events}
            bodies.append(json.dumps(events))
            commands = [" ".join(p.info["cmdline"] or []) for p in psutil.process_iter(["cmdline"])]
    finally:
        svc.stop()
    assert secret not in svc.log_text()
    for body in bodies:
        assert secret not in body
    assert not [c for c in commands if secret in c], "the secret in a process's command line"
    stored = [p for p in svc.home.rglob("*") if p.is_file()]
    assert any(p.name.startswith("modelrouter.db") for p in stored)
    for path in stored:
        assert secret.encode() not in path.read_bytes(), path
