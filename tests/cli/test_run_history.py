"""``modelrouter run``, ``load``, ``unload``, ``ls``, ``ps``, ``events`` and ``history``
on one model's life: download, load, a crash, a load again, an unload."""

from __future__ import annotations

import json
import os
import signal

import httpx

from devtools.service_process import ServiceProcess
from tests.cli.conftest import cli, events, start_cli, wait_for_event
from tests.eventually import eventually


def _instance_pid(svc: ServiceProcess, model: str) -> int:
    entry = next(m for m in httpx.get(f"{svc.url}/models", timeout=10).json()["data"] if m["id"] == model)
    return int(entry["status"]["instance"]["pid"])


def test_run_history_and_friends(svc: ServiceProcess, tiny_repo: str) -> None:
    model = f"{tiny_repo}:Q4_K_M"
    assert cli(svc, "pull", model).returncode == 0

    # run: loads the model (it is not loaded yet), answers once, exits 0.
    answer = cli(svc, "run", tiny_repo, "Say hi", "--max-tokens", "8", "--seed", "1")
    assert answer.returncode == 0, answer.stderr
    lines = answer.stdout.splitlines()
    assert lines[0].startswith(f"loading {model}")  # the load progress bar
    assert lines[1].startswith(f"{model} loaded in")
    assert "".join(lines[2:]).strip(), "no answer printed"  # random weights: gibberish, but printed

    listing = cli(svc, "ls")
    assert listing.returncode == 0
    row = next(line for line in listing.stdout.splitlines() if line.startswith(model))
    assert row.split()[1:5] == ["loaded", "Q4_K_M", "240.2", "kB"] and "llama" in row
    running = cli(svc, "ps")
    assert running.returncode == 0
    pid = _instance_pid(svc, model)
    assert str(pid) in running.stdout

    # A crash: SIGKILL the inference worker, as the OOM killer would.
    os.kill(pid, signal.SIGKILL)
    wait_for_event(svc, "instance_crashed", model=model)
    assert cli(svc, "load", model).returncode == 0
    assert cli(svc, "unload", model).returncode == 0
    wait_for_event(svc, "instance_stopped", model=model)

    shown = cli(svc, "history", tiny_repo)
    assert shown.returncode == 0, shown.stderr
    assert "finished" in shown.stdout
    assert "crashed (signal 9)" in shown.stdout
    assert "unloaded" in shown.stdout
    assert "2 loads, 0 restarts, 1 crashes, 1 requests served" in shown.stdout

    body = json.loads(cli(svc, "history", model, "--json").stdout)
    (download,) = body["downloads"]
    assert (download["outcome"], download["bytes_done"]) == ("finished", download["bytes_total"])
    crashed, unloaded = body["loads"]
    assert (crashed["ended"], crashed["signal"], crashed["requests_served"], crashed["pid"]) == ("crashed", 9, 1, pid)
    assert (unloaded["ended"], unloaded["requests_served"]) == ("unload", 0)
    assert crashed["uptime_seconds"] is not None and unloaded["load_ms"] > 0

    log = cli(svc, "events", "--model", model, "--type", "instance_*", "--json")
    types = [json.loads(line)["type"] for line in log.stdout.splitlines()]
    assert types.count("instance_ready") == 2 and "instance_crashed" in types

    # --follow replays from --after, then waits for more: the first line is the first event.
    follow = start_cli(svc, "events", "--follow", "--json", "--model", model, "--after", "0")
    try:
        assert follow.stdout is not None
        first = json.loads(follow.stdout.readline())
        assert (first["type"], first["model"]) == ("download_requested", model)
    finally:
        follow.terminate()
        follow.wait(timeout=30)


def test_interactive_run_reads_turns_until_bye(svc: ServiceProcess, tiny_repo: str) -> None:
    """``run MODEL`` with no prompt: a prompt per turn, an answer per turn, /bye leaves."""
    model = f"{tiny_repo}:Q4_K_M"
    assert cli(svc, "pull", model).returncode == 0
    session = cli(svc, "run", model, "--max-tokens", "4", input="hello\nhow are you?\n/bye\n")
    assert session.returncode == 0, session.stdout + session.stderr
    assert session.stdout.count(">>> ") == 3  # two turns, then /bye
    # request_completed is appended beside the answer, not before it: wait for the second
    eventually(lambda: len(events(svc, type="request_completed", model=model)) == 2, "both turns recorded")
    assert len(events(svc, type="request_completed", model=model)) == 2
