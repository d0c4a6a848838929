"""``modelrouter pull``: progress bars, Ctrl-C cancels and keeps the partial, pull again resumes."""

from __future__ import annotations

import signal
from pathlib import Path

from devtools.hub_control import HubServer
from devtools.hub_repos import make_repo
from devtools.service_process import ServiceProcess
from tests.cli.conftest import cli, events, start_cli, wait_for_event
from tests.conftest_hub import unique_repo

BIG = 3_000_000  # bytes; the Hub holds the response at half of them until the test releases it


def test_pull_shows_progress_and_finishes(svc: ServiceProcess, hub: HubServer, tiny_repo: str) -> None:
    result = cli(svc, "pull", f"{tiny_repo}:Q4_K_M")
    assert result.returncode == 0, result.stderr
    assert "tiny-Q4_K_M.gguf" in result.stdout  # the file's bar
    assert "downloaded in" in result.stdout
    (finished,) = events(svc, type="download_finished", model=f"{tiny_repo}:Q4_K_M")
    size = finished["data"]["bytes_total"]
    assert f"{size / 1000:.1f}/{size / 1000:.1f} kB" in result.stdout  # the bar at 100 %


def test_ctrl_c_cancels_keeping_the_partial_and_pull_again_resumes(svc: ServiceProcess, hub: HubServer) -> None:
    repo = unique_repo("cli-big")
    make_repo(hub.root, repo, {"big-Q4_K_M.gguf": BIG})
    # Held at half: Ctrl-C lands mid-way however slow a busy machine is (a throttle let the
    # download finish before a late Ctrl-C took effect).
    hub.set_faults({"kind": "stall", "repo": repo, "at_fraction": 0.5})
    model = f"{repo}:Q4_K_M"
    pull = start_cli(svc, "pull", model)
    try:
        wait_for_event(svc, "download_progress", model=model)
        pull.send_signal(signal.SIGINT)
        out, err = pull.communicate(timeout=60)
    finally:
        pull.kill()
    own = f"(this process: SIGINT handler {signal.getsignal(signal.SIGINT)!r}, blocked {signal.pthread_sigmask(signal.SIG_BLOCK, [])})"
    assert pull.returncode == 130, f"{err} {own}"
    assert "Traceback" not in err
    (cancelled,) = events(svc, type="download_cancelled", model=model)
    kept = cancelled["data"]["bytes_on_disk"]
    assert 0 < kept < BIG and not cancelled["data"]["discarded"]
    assert "kept" in out and "again to resume" in out
    assert list(Path(svc.home).rglob("*.incomplete")), "the partial file is gone"

    hub.reset()  # clears the stall and releases the held response
    again = cli(svc, "pull", model)
    assert again.returncode == 0, again.stderr
    assert "already on disk" in again.stdout
    started = events(svc, type="download_started", model=model)[-1]
    assert started["data"]["resumed_bytes"] >= kept
    assert "downloaded in" in again.stdout


def test_a_failed_download_prints_its_reason_and_a_hint(svc: ServiceProcess, hub: HubServer) -> None:
    repo = unique_repo("cli-corrupt")
    make_repo(hub.root, repo, {"bad-Q4_K_M.gguf": 200_000})
    hub.set_faults({"kind": "corrupt", "repo": repo, "times": None})
    result = cli(svc, "pull", f"{repo}:Q4_K_M")
    assert result.returncode == 1
    (line,) = result.stderr.strip().splitlines()
    assert "checksum_mismatch" in line and "hint:" in line
