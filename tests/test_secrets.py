"""Secrets (the Hub token, API keys) never appear in logs, events or error bodies
(issue 11 §1.4: an unhandled-exception log dumped frame locals, and with them
``Settings(hf_token=...)``, four times)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import httpx

from devtools.hub_repos import make_repo
from devtools.hub_server import HubServer
from devtools.service_process import ServiceProcess
from service.settings import Settings
from tests.conftest_hub import unique_repo
from tests.eventually import eventually

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
