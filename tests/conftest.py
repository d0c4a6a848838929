"""Shared fixtures: a migrated SQLite file, settings, and the real service in a subprocess."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "0")

from devtools.service_process import ServiceProcess

pytest_plugins = ["tests.conftest_hub"]
from service.event_store.migrate import upgrade  # noqa: E402
from service.settings import Settings  # noqa: E402


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    """A migrated, empty event log."""
    path = tmp_path / "modelrouter.db"
    upgrade(path)
    return path


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(home=tmp_path / "home")


@pytest.fixture
def service(tmp_path: Path) -> Iterator[ServiceProcess]:
    """The real service (uvicorn + Litestar) as a child process."""
    proc = ServiceProcess(tmp_path / "svc-home")
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()
