"""Telling "the database is unreachable" apart from every other failure (stdlib only).

A PostgreSQL server can restart under a running service; the append then fails, and must
fail with a message a person can act on (:class:`rows.StoreUnavailable`, a 503) rather than
as a bug (a 500). What counts: socket errors and timeouts, libpq's connection-exception
SQLSTATEs (class 08), the server shutting down or starting up (57P01-57P03), no free
connection slot (53300), whatever SQLAlchemy marked as a disconnect, and psycopg's
``OperationalError`` without a SQLSTATE (libpq's own "server closed the connection": the
server never answered, so there is no state to report). Found by walking the exception
chain, since SQLAlchemy wraps the driver's error, which may wrap an ``OSError``. Callers
ask only about PostgreSQL errors (on SQLite "database is locked" has no SQLSTATE either).

A full disk is the other failure a person can act on (:class:`rows.LogDiskFull`, a 507):
SQLite's ``SQLITE_FULL`` (13; its unix VFS turns ``ENOSPC`` into it) and
``SQLITE_IOERR_SHMSIZE`` (4874: the ``-shm`` file could not grow, which is what opening the
first connection to a log on a full disk answers), an ``OSError`` with
``ENOSPC`` or ``EDQUOT``, and PostgreSQL's ``53100 disk_full`` ("could not extend file"). Ask
:func:`disk_full_cause` first: an ``OSError`` would otherwise read as unreachable.
"""

from __future__ import annotations

import errno

_SQLSTATES = {"57P01", "57P02", "57P03", "53300"}
_DISK_FULL_SQLSTATE = "53100"
_SQLITE_FULL = 13
_SQLITE_IOERR_SHMSIZE = 4874
_FULL_ERRNOS = {errno.ENOSPC, errno.EDQUOT}


def _links(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    stack: list[BaseException | None] = [exc]
    while stack:
        current = stack.pop()
        if current is None or any(current is s for s in seen):
            continue
        seen.append(current)
        orig = getattr(current, "orig", None)
        stack += [current.__cause__, current.__context__, orig if isinstance(orig, BaseException) else None]
    return seen


def is_unreachable(exc: BaseException) -> bool:
    """Whether ``exc`` means the database could not be reached or the connection broke."""
    for link in _links(exc):
        if isinstance(link, (OSError, TimeoutError)) or getattr(link, "connection_invalidated", False):
            return True
        state = getattr(link, "sqlstate", None)
        if isinstance(state, str) and (state.startswith("08") or state in _SQLSTATES):
            return True
        name = type(link).__name__
        if name in ("ConnectionDoesNotExistError", "ConnectionFailureError", "InterfaceError"):
            return True
        if name == "OperationalError" and type(link).__module__.startswith("psycopg") and state is None:
            return True
    return False


def disk_full_cause(exc: BaseException) -> BaseException | None:
    """The driver's or the OS's error in ``exc``'s chain saying the disk that holds the log has
    no room for the append (describe that one: it has no SQLAlchemy wrapping), or None."""
    for link in _links(exc):
        if isinstance(link, OSError) and link.errno in _FULL_ERRNOS:
            return link
        if getattr(link, "sqlstate", None) == _DISK_FULL_SQLSTATE:
            return link
        code = getattr(link, "sqlite_errorcode", None)  # the primary code is the low byte
        if isinstance(code, int) and (code & 0xFF == _SQLITE_FULL or code == _SQLITE_IOERR_SHMSIZE):
            return link
    return None


def describe(exc: BaseException) -> str:
    """The driver's own words, first line only (SQLAlchemy appends SQL and a docs link)."""
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
