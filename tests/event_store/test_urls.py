"""Database URLs: which backend, each driver's form, and a password kept out of logs and argv."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.event_store.urls import check_url, is_postgres, libpq_url, redacted, sqlalchemy_url, without_password
from service.settings import Settings
from service.supervision.worker_args import store_argv, store_env

URL = "postgresql://mr:s%40cret@db.example:5433/log?sslmode=require"


def test_backend_and_driver_forms() -> None:
    assert is_postgres(URL) and is_postgres("postgres://h/db") and is_postgres("postgresql+asyncpg://h/db")
    assert not is_postgres("sqlite+aiosqlite:///x.db")
    assert sqlalchemy_url("postgres://h/db", "asyncpg") == "postgresql+asyncpg://h/db"
    assert libpq_url("postgresql+psycopg://h/db") == "postgresql://h/db"


def test_a_password_is_redacted_and_travels_apart() -> None:
    assert redacted(URL) == "postgresql://mr:***@db.example:5433/log?sslmode=require"
    assert without_password(URL) == ("postgresql://mr@db.example:5433/log?sslmode=require", "s@cret")
    settings = Settings(home=Path("/tmp/h"), database_url=URL)
    assert "s%40cret" not in repr(settings) and "s@cret" in settings.secrets()


@pytest.mark.parametrize(
    ("url", "why"),
    [("mysql://h/db", "expected sqlite:///PATH or postgresql://"), ("postgresql://h", "names no database")],
)
def test_an_unusable_url_is_refused_in_words(url: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        check_url(url)
    with pytest.raises(ValueError, match=why):
        Settings(home=Path("/tmp/h"), database_url=url)


def test_workers_get_the_url_without_its_password_and_sqlite_workers_get_db_as_before(tmp_path: Path) -> None:
    postgres = Settings(home=tmp_path, database_url=URL)
    assert store_argv(postgres) == ["--database-url", "postgresql://mr@db.example:5433/log?sslmode=require"]
    assert store_env(postgres) == {"PGPASSWORD": "s@cret"}
    sqlite = Settings(home=tmp_path)
    assert store_argv(sqlite) == ["--db", str(tmp_path / "modelrouter.db")]
    assert store_env(sqlite) == {}
