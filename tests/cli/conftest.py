"""The real ``modelrouter`` command against a real service and the project's test Hub."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from devtools.hub_control import HubServer
from devtools.hub_repos import make_repo
from devtools.service_process import ServiceProcess
from devtools.tiny_gguf import write_tiny_gguf
from tests.conftest_hub import REPO_ROOT, unique_repo
from tests.service_probes import events, wait_for_event

__all__ = ["events", "wait_for_event"]  # the CLI tests import them from here


@pytest.fixture(scope="module")
def svc(hub_server: HubServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    """One service per module (starting one costs seconds on a busy machine); every
    test uses its own repos, and the ``hub`` fixture resets faults between tests."""
    proc = ServiceProcess(tmp_path_factory.mktemp("home"), env={"HF_ENDPOINT": hub_server.url}).start()
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture
def tiny_repo(hub: HubServer, tmp_path: Path) -> str:
    """A Hub repo holding one tiny real (loadable) GGUF."""
    repo = unique_repo("cli")
    make_repo(hub.root, repo, {"tiny-Q4_K_M.gguf": write_tiny_gguf(tmp_path / "tiny.gguf", seed=3).read_bytes()})
    return repo


def cli_env(svc: ServiceProcess | str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MODELROUTER_")}
    url = svc if isinstance(svc, str) else svc.url
    # COLUMNS: rich lays tables out for this width when stdout is a pipe.
    return {**env, "MODELROUTER_URL": url, "COLUMNS": "200", **extra}


def cli(
    svc: ServiceProcess | str, *args: str, timeout: float = 90, input: str = "", **env: str
) -> subprocess.CompletedProcess[str]:
    """``python -m service.cli ARGS`` to the end (``input`` on stdin); its output as text."""
    return subprocess.run(
        [sys.executable, "-m", "service.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO_ROOT,
        env=cli_env(svc, **env),
        input=input,
    )


# A child inherits its parent's ignored signals and blocked-signal mask across exec, and by the time
# the CLI tests run, the suite's own process may have either for SIGINT (a Ctrl-C test once saw the
# CLI ignore it: no cancel, exit 0). A person's terminal gives the CLI SIGINT at its default and
# unblocked; so does this trampoline, before it becomes the CLI.
_AS_FROM_A_TERMINAL = (
    "import os, signal, sys; signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT}); "
    "signal.signal(signal.SIGINT, signal.SIG_DFL); os.execv(sys.executable, [sys.executable, *sys.argv[1:]])"
)


def start_cli(svc: ServiceProcess, *args: str) -> subprocess.Popen[str]:
    """The CLI running in the background, with SIGINT as a terminal gives it (for Ctrl-C tests)."""
    return subprocess.Popen(
        [sys.executable, "-c", _AS_FROM_A_TERMINAL, "-m", "service.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO_ROOT,
        env=cli_env(svc),
        stdin=subprocess.DEVNULL,
    )
