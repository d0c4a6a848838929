"""Which backend a database URL names, and the forms each driver wants (stdlib only: workers import it).

* ``sqlite[+driver]:///path`` -- the embedded default, a file;
* ``postgresql[+driver]://user[:password]@host[:port]/db`` (also ``postgres://``) -- a server.

The service reaches PostgreSQL through SQLAlchemy + asyncpg, CLI tools through SQLAlchemy +
psycopg, workers through psycopg alone; :func:`sqlalchemy_url` and :func:`libpq_url` give each
its form of the same URL. Nothing here imports a driver, so the SQLite path never loads one.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import unquote, urlsplit, urlunsplit

_PG_SCHEMES = ("postgresql", "postgres")


def is_postgres(url: str) -> bool:
    """Whether ``url`` names a PostgreSQL database."""
    scheme = url.partition(":")[0].partition("+")[0].lower()
    return scheme in _PG_SCHEMES


def is_sqlite(url: str) -> bool:
    return url.partition(":")[0].partition("+")[0].lower() == "sqlite"


def sqlite_path(url: str) -> Path:
    """The database file behind a ``sqlite[+driver]:///path`` URL."""
    prefix, sep, rest = url.partition(":///")
    if not sep or not prefix.startswith("sqlite"):
        msg = f"only sqlite URLs name a file, got {redacted(url)!r}"
        raise ValueError(msg)
    return Path(rest)


def check_url(url: str) -> None:
    """Raise ``ValueError`` with a readable message unless ``url`` is a usable database URL."""
    if is_sqlite(url):
        sqlite_path(url)
        return
    if not is_postgres(url):
        msg = f"database URL {redacted(url)!r}: expected sqlite:///PATH or postgresql://user@host/db"
        raise ValueError(msg)
    parts = urlsplit(url)
    if not parts.path.strip("/"):
        msg = f"database URL {redacted(url)!r} names no database (postgresql://user@host/DATABASE)"
        raise ValueError(msg)


def _with_scheme(url: str, scheme: str) -> str:
    return scheme + url[url.index(":") :]


def sqlalchemy_url(url: str, driver: str) -> str:
    """``postgresql+<driver>://...`` for SQLAlchemy (``asyncpg`` for the service, ``psycopg`` for tools)."""
    return _with_scheme(url, f"postgresql+{driver}")


def libpq_url(url: str) -> str:
    """The plain ``postgresql://...`` form libpq (psycopg) accepts."""
    return _with_scheme(url, "postgresql")


def redacted(url: str) -> str:
    """``url`` with its password replaced, for messages, logs and events."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable URL>"
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


def without_password(url: str) -> tuple[str, str | None]:
    """``(url without its password, the password)``: a worker gets the first on its command line
    (visible to every user in ``ps``) and the second in ``PGPASSWORD``, which libpq reads."""
    parts = urlsplit(url)
    if parts.password is None:
        return url, None
    netloc = parts.netloc.replace(f":{parts.password}@", "@", 1)
    return urlunsplit(parts._replace(netloc=netloc)), unquote(parts.password)


def display_name(url: str) -> str:
    """What reports show for a database: the file for SQLite, the redacted URL for PostgreSQL."""
    return str(sqlite_path(url)) if is_sqlite(url) else redacted(url)
