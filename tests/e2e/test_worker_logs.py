"""Workers' logs through the real service: a real inference worker's load log and a real
download worker's account reach the service's log with their prefix, and their own files."""

from __future__ import annotations

import json
import os
import signal
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from httpx_sse import connect_sse

from devtools.hub_repos import make_repo
from devtools.hub_server import HubServer
from devtools.service_process import ServiceProcess
from tests.cli.conftest import cli, start_cli
from tests.conftest_hub import unique_repo
from tests.eventually import eventually
from tests.service_probes import wait_for_event


def _forwarded(svc: ServiceProcess, prefix: str) -> list[str]:
    """The service log's lines forwarded from the worker ``prefix`` names (JSON lines: their event)."""
    found = []
    for line in svc.log_text().splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and str(record.get("event", "")).startswith(prefix):
            found.append(record["event"])
    return found


def _loaded(svc: ServiceProcess) -> tuple[str, Path]:
    assert httpx.post(f"{svc.url}/models/load", json={"model": "tiny-a"}, timeout=10).status_code == 200
    ready = wait_for_event(svc, "instance_ready", model="tiny-a")
    instance = ready["data"]["instance_id"]
    path = svc.home / "logs" / "workers" / f"instance-{instance}.log"
    assert ready["data"]["log_path"] == str(path)  # the event says where the instance's log is
    return instance, path


@pytest.mark.timeout(90)
def test_the_load_log_is_in_the_file_and_on_the_console_only_at_verbose(tmp_path: Path, models_dir: Path) -> None:
    """At llama-server's default verbosity the console shows the worker's own lines, not llama.cpp's
    load log; the file keeps the load log all the same. With ``-v`` the console shows it too."""
    env = {"MODELROUTER_MODELS_DIR": str(models_dir)}
    with ServiceProcess(tmp_path / "quiet", env=env) as quiet:
        instance, path = _loaded(quiet)
        text = eventually(lambda: path.exists() and "print_info" in path.read_text() and path.read_text(), "load log")
        assert "llama_model_loader" in text and "load_tensors" in text
        prefix = f"[inference:tiny-a:{instance}] "
        lines = eventually(lambda: _forwarded(quiet, prefix), "a forwarded line")
        assert not [ln for ln in lines if "print_info" in ln]
    # -v, and small files: the load log rotates past MODELROUTER_WORKER_LOG_MAX_BYTES, one backup kept.
    small = {**env, "MODELROUTER_WORKER_LOG_MAX_BYTES": "4096", "MODELROUTER_WORKER_LOG_BACKUPS": "1"}
    with ServiceProcess(tmp_path / "verbose", env=small, args=["-v"]) as verbose:
        instance, path = _loaded(verbose)
        prefix = f"[inference:tiny-a:{instance}] "
        eventually(lambda: [ln for ln in _forwarded(verbose, prefix) if "print_info" in ln], "the load log forwarded")
        backup = path.with_name(path.name + ".1")
        eventually(backup.exists, "the file rotated")
        assert sorted(p.name for p in path.parent.iterdir()) == [path.name, backup.name]
        assert path.stat().st_size <= 4096 and backup.stat().st_size <= 4096


@pytest.mark.timeout(90)
def test_a_download_worker_says_what_it_resolved_and_how_it_ended(hub: HubServer, tmp_path: Path) -> None:
    repo = unique_repo("logs")
    make_repo(hub.root, repo, {"m-Q4_K_M.gguf": 1024 * 1024})
    with ServiceProcess(tmp_path / "home", env={"HF_ENDPOINT": hub.url}) as svc:
        answer = httpx.post(f"{svc.url}/models", json={"model": repo}, timeout=30)
        assert answer.status_code == 200, answer.text
        job_id = answer.json()["job_id"]
        path = svc.home / "logs" / "workers" / f"download-{job_id}.log"

        def finished() -> list[dict[str, Any]] | None:
            if not path.exists():
                return None
            records = [json.loads(ln) for ln in path.read_text().splitlines() if ln.startswith("{")]
            return records if any(r["event"] == "download_finished" for r in records) else None

        records = eventually(finished, "download_finished in the job's log")
        resolved = next(r for r in records if r["event"] == "download_resolved")
        assert resolved["repo"] == repo and resolved["files"] == ["m-Q4_K_M.gguf"]
        eventually(lambda: _forwarded(svc, f"[download:{job_id}] "), "the job's lines forwarded")
        answer = httpx.get(f"{svc.url}/downloads/{job_id}/logs", params={"tail": 1000}, timeout=10)
        assert answer.status_code == 200 and answer.json()["job_id"] == job_id
        assert answer.json()["lines"] == path.read_text().splitlines()
        printed = cli(svc, "logs", "--job", job_id, "--tail", "2")
        assert printed.returncode == 0 and printed.stdout.splitlines() == path.read_text().splitlines()[-2:]
        history = httpx.get(f"{svc.url}/models/{repo}:Q4_K_M/history", timeout=10).json()
        assert history["downloads"][-1]["log"] == f"/downloads/{job_id}/logs"
        missing = httpx.get(f"{svc.url}/downloads/nope/logs", timeout=10)
        assert missing.status_code == 404 and missing.headers["content-type"].startswith("application/problem+json")


@pytest.mark.timeout(240)
def test_a_real_worker_flooding_its_log_is_dropped_with_a_count_while_it_keeps_serving(
    tmp_path: Path, models_dir: Path
) -> None:
    """A real inference worker's output past the bound (MODELROUTER_WORKER_LOG_MAX_PENDING=1, ``-v`` so
    the writer also formats each line for the console): llama.cpp's load log, then rounds of concurrent
    requests, each writing its ``request_finished`` line. Lines are dropped and counted (in the file and,
    with the worker's prefix, on the console) while every request is answered: the flood blocks nothing."""
    env = {"MODELROUTER_MODELS_DIR": str(models_dir), "MODELROUTER_WORKER_LOG_MAX_PENDING": "1"}
    with ServiceProcess(tmp_path / "home", env=env, args=["-v"]) as svc:
        instance, path = _loaded(svc)
        body = {"model": "tiny-a", "prompt": "once upon a time", "max_tokens": 2}

        def ask(_: int) -> int:
            return httpx.post(f"{svc.url}/v1/completions", json=body, timeout=60).status_code

        def notices() -> list[str]:
            return [ln for ln in path.read_text().splitlines() if ln.startswith("[modelrouter]")]

        with ThreadPoolExecutor(8) as pool:
            for _ in range(10):  # the load log alone overflows a bound of 1 (a burst of ~100 lines)
                assert list(pool.map(ask, range(16))) == [200] * 16  # the worker answers throughout
                if notices():
                    break
        assert ask(0) == 200  # and after
        dropped = eventually(notices, "a count of dropped lines in the worker's file")
        assert all(ln.endswith("lines dropped (the worker wrote faster than its log)") for ln in dropped)
        assert sum(int(ln.split()[1]) for ln in dropped) > 0
        prefix = f"[inference:tiny-a:{instance}] [modelrouter] "
        eventually(lambda: [ln for ln in _forwarded(svc, prefix) if "lines dropped" in ln], "the count on the console")
        assert httpx.get(f"{svc.url}/models/tiny-a/logs", params={"tail": 5}, timeout=10).status_code == 200


KEY = "sk-admin-logs-0123456789"


@pytest.mark.timeout(120)
def test_an_instance_log_through_the_api_and_the_cli_and_after_a_crash_and_a_restart(
    tmp_path: Path, models_dir: Path
) -> None:
    """``tail`` through the HTTP API and the CLI, the history's link, bad input as problems; then a
    SIGKILL: the crash report's tail is the file's, and a restarted service still serves the log."""
    home, env = tmp_path / "home", {"MODELROUTER_MODELS_DIR": str(models_dir)}
    with ServiceProcess(home, env=env) as svc:
        instance, path = _loaded(svc)
        eventually(lambda: "load_tensors" in path.read_text(), "the load log in the file")
        body = httpx.get(f"{svc.url}/models/tiny-a/logs", params={"tail": 5}, timeout=10).json()
        assert body["instance_id"] == instance and body["log_path"] == str(path) and len(body["lines"]) == 5
        link = httpx.get(f"{svc.url}/models/tiny-a/history", timeout=10).json()["loads"][-1]["log"]
        assert link == f"/models/tiny-a/logs?instance={instance}"
        assert httpx.get(f"{svc.url}{link}", timeout=10).json()["instance_id"] == instance
        for params, status in (({"tail": 0}, 400), ({"tail": "x"}, 400), ({"instance": "nope"}, 404)):
            bad = httpx.get(f"{svc.url}/models/tiny-a/logs", params=params, timeout=10)
            assert bad.status_code == status, bad.text
            assert bad.headers["content-type"].startswith("application/problem+json")
        printed = cli(svc, "logs", "tiny-a", "--tail", "3")
        assert printed.returncode == 0, printed.stderr
        assert printed.stdout.splitlines() == path.read_text().splitlines()[-3:]
        refused = cli(svc, "logs", "tiny-a", "--instance", "nope")
        assert refused.returncode != 0 and "nope" in refused.stderr

        # One line per finished request, as llama-server prints its timings.
        body = {"model": "tiny-a", "prompt": "once upon", "max_tokens": 3}
        completion = httpx.post(f"{svc.url}/v1/completions", json=body, timeout=60).json()

        def finished() -> dict[str, Any] | None:
            records = [json.loads(ln) for ln in path.read_text().splitlines() if ln.startswith("{")]
            return next((r for r in records if r["event"] == "request_finished"), None)

        line = eventually(finished, "request_finished in the instance's log")
        assert line["cmpl_id"] == completion["id"] and line["predicted_n"] == completion["usage"]["completion_tokens"]
        assert line["prompt_n"] > 0 and line["predicted_ms"] >= 0 and line["stop"] in ("length", "stop")
        pid = wait_for_event(svc, "instance_ready", model="tiny-a")["data"]["pid"]
        os.kill(pid, signal.SIGKILL)
        crashed = wait_for_event(svc, "instance_crashed", model="tiny-a")["data"]
        tail = [ln for ln in crashed["stderr_tail"].splitlines() if ln.strip()]
        assert tail and tail[-1] == path.read_text().splitlines()[-1]  # the crash tail is the file's end
    with ServiceProcess(home, env=env, args=["--api-key", KEY]) as again:
        url = f"{again.url}/models/tiny-a/logs"
        assert httpx.get(url, params={"instance": instance}, timeout=10).status_code == 401
        answer = httpx.get(url, params={"instance": instance, "tail": 1000}, headers={"Authorization": f"Bearer {KEY}"})
        assert answer.status_code == 200 and answer.json()["lines"] == path.read_text().splitlines()[-1000:]
        assert tail[-1] in answer.json()["lines"]


@pytest.mark.timeout(120)
def test_following_an_instance_log_over_sse_and_with_the_cli(tmp_path: Path, models_dir: Path) -> None:
    """``GET /logs/stream`` (a real SSE client): the last lines, then what the worker writes as it
    stops, each with its byte offset as id; ``Last-Event-ID`` resumes with no gap and no duplicate.
    ``modelrouter logs -f`` prints the same lines as they come."""
    with ServiceProcess(tmp_path / "home", env={"MODELROUTER_MODELS_DIR": str(models_dir)}) as svc:
        _, path = _loaded(svc)
        eventually(lambda: "instance_ready" in path.read_text(), "instance_ready in the file")
        got: list[tuple[str, int]] = []
        opened = threading.Event()

        def listen() -> None:
            params = {"model": "tiny-a", "tail": 2}
            with (
                httpx.Client(timeout=60) as client,
                connect_sse(client, "GET", f"{svc.url}/logs/stream", params=params) as source,
            ):
                opened.set()
                for sse in source.iter_sse():
                    if sse.event == "log":
                        got.append((sse.data, int(sse.id)))
                    if '"instance_stopped"' in sse.data:
                        return

        follower = start_cli(svc, "logs", "tiny-a", "-f", "--tail", "1")
        listener = threading.Thread(target=listen)
        listener.start()
        assert opened.wait(30)
        eventually(lambda: len(got) >= 2, "the replayed tail")
        assert httpx.post(f"{svc.url}/models/unload", json={"model": "tiny-a"}, timeout=30).status_code == 200
        listener.join(60)
        assert not listener.is_alive()
        data = path.read_bytes()
        lines = data.decode().splitlines()
        assert [line for line, _ in got[:2]] == lines[len(lines) - len(got) : len(lines) - len(got) + 2]
        assert any('"instance_stopped"' in line for line, _ in got)  # written after the stream opened
        for line, offset in got:  # each id is the offset just past its line
            assert data[:offset].decode().endswith(line + "\n")
        # Resume after the first line: the rest, exactly.
        after = got[0][1]
        with (
            httpx.Client(timeout=60) as client,
            connect_sse(
                client,
                "GET",
                f"{svc.url}/logs/stream",
                params={"model": "tiny-a"},
                headers={"Last-Event-ID": str(after)},
            ) as source,
        ):
            resumed = []
            for sse in source.iter_sse():
                resumed.append(sse.data)
                if '"instance_stopped"' in sse.data:
                    break
        assert resumed == [line for line, _ in got[1:]]
        assert follower.stdout is not None
        printed: list[str] = []
        while not printed or '"instance_stopped"' not in printed[-1]:  # the CLI's own lines, as they come
            line = follower.stdout.readline()
            assert line, f"modelrouter logs -f ended early: {follower.stderr.read() if follower.stderr else ''}"
            printed.append(line.rstrip("\n"))
        assert (
            printed[0] in lines and printed == lines[lines.index(printed[0]) : lines.index(printed[0]) + len(printed)]
        )
        follower.send_signal(signal.SIGINT)
        assert follower.wait(30) == 130
