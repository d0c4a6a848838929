"""Shared fixtures: a migrated SQLite file, a migrated PostgreSQL database, settings, and the
real service in a subprocess."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "0")

from devtools.postgres_server import PostgresServer, pg_bin_dir
from devtools.service_process import ServiceProcess
from devtools.shared_ssl import share_ssl_contexts
from devtools.tiny_video import ffmpeg_missing

share_ssl_contexts()  # every httpx.get of the suite made a new SSL context: ~50 ms of CPU each

pytest_plugins = ["tests.conftest_hub"]
from service.recovery.migrate import upgrade, upgrade_url  # noqa: E402
from service.settings import Settings  # noqa: E402


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    """A migrated, empty event log."""
    path = tmp_path / "modelrouter.db"
    upgrade(path)
    return path


_TEMPLATE = "modelrouter_template"
_numbers = itertools.count(1)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PostgresServer]:
    """One real PostgreSQL server for the whole session (started on first use), with a
    migrated template database that every test's database is copied from."""
    if pg_bin_dir() is None:
        pytest.fail("PostgreSQL server binaries missing: install Debian's `postgresql` (make test does)")
    server = PostgresServer().start()
    try:
        upgrade_url(server.create_database(_TEMPLATE))
        yield server
    finally:
        server.close()


@pytest.fixture(scope="session")
def ffmpeg() -> None:
    """Debian's ffmpeg and ffprobe on ``PATH`` (videos are read with them, as llama-server reads them),
    or the test fails saying so: never a silent skip."""
    why = ffmpeg_missing()
    if why:
        pytest.fail(why)


@pytest.fixture
def pg_url(pg_server: PostgresServer) -> str:
    """A migrated, empty event log in a database of its own on the session's server."""
    return pg_server.create_database(f"t{next(_numbers)}", template=_TEMPLATE)


@pytest.fixture(params=["sqlite", "postgresql"])
def db_location(request: pytest.FixtureRequest, tmp_path: Path) -> Path | str:
    """A migrated, empty event log on each backend: a SQLite file, a PostgreSQL URL."""
    if request.param == "sqlite":
        path = tmp_path / "modelrouter.db"
        upgrade(path)
        return path
    return str(request.getfixturevalue("pg_url"))


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
