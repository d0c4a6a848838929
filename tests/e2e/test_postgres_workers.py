"""The real service on PostgreSQL spawns a real inference worker that appends to the same log.

The worker gets ``--database-url`` without the password (a command line is public) and the
password in ``PGPASSWORD``; the test server demands it over TCP, so a worker that did not
get it could not append ``instance_ready``, and the service's NOTIFY tail would never fold it.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from devtools.postgres_server import PASSWORD
from devtools.service_process import ServiceProcess
from tests.eventually import eventually
from tests.service_probes import inference_children, model_entry, wait_for_event


@pytest.mark.timeout(180)
def test_a_worker_appends_to_the_postgresql_log_with_the_password_kept_off_its_command_line(
    pg_url: str, models_dir: Path, tmp_path: Path
) -> None:
    env = {"MODELROUTER_DATABASE_URL": pg_url, "MODELROUTER_MODELS_DIR": str(models_dir)}
    svc = ServiceProcess(tmp_path / "home", env=env).start()
    try:
        assert httpx.post(f"{svc.url}/models/load", json={"model": "tiny-a"}, timeout=30).status_code == 200
        ready = wait_for_event(svc, "instance_ready", timeout=90)
        assert ready["source"]["kind"] == "inference_worker", ready
        # The event is in the log: now the service's tail folds it.
        eventually(lambda: model_entry(svc, "tiny-a")["status"]["value"] == "loaded", "tiny-a loaded", timeout=30)
        (worker,) = inference_children(svc)
        argv = worker.cmdline()
        assert "--database-url" in argv and "--db" not in argv
        assert PASSWORD not in " ".join(argv), "the password must not be on a command line"
        assert worker.environ().get("PGPASSWORD") == PASSWORD
    finally:
        svc.stop()
