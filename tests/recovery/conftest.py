"""The recovery tests that start a real service run on each backend: a SQLite file under the
service's home (the default), and a PostgreSQL database of their own (``--database-url``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest


@dataclass(frozen=True)
class LogBackend:
    """Where a test's service keeps its log."""

    name: str
    url: str | None = None  # a PostgreSQL database; None: the SQLite file under the service's home

    def location(self, home: Path) -> Path | str:
        """What a store opened by the test itself is given (``SyncEventStore``, ``verify``)."""
        return self.url if self.url is not None else home / "modelrouter.db"

    @property
    def args(self) -> list[str]:
        """The ``serve`` arguments that put the service's log there."""
        return ["--database-url", self.url] if self.url is not None else []


@pytest.fixture(params=["sqlite", "postgresql"])
def log_backend(request: pytest.FixtureRequest) -> LogBackend:
    """Each backend in turn: the SQLite file, then a migrated PostgreSQL database (``pg_url``)."""
    if request.param == "sqlite":
        return LogBackend("sqlite")
    return LogBackend("postgresql", str(request.getfixturevalue("pg_url")))
