"""A real PostgreSQL server in a temporary data directory (tests, benchmarks).

Debian's ``postgresql`` package (``/usr/lib/postgresql/<version>/bin``), started as an
unprivileged user: ``initdb`` and ``postgres`` refuse to run as root, and tests run as
root here, so the server runs as ``nobody`` (or the current user when it is not root).
It listens on 127.0.0.1 on a free port and on a Unix socket inside its directory; the socket
is trusted (admin commands), TCP needs the password (:data:`PASSWORD`, in every :meth:`url`),
so the tests cover password authentication (and the workers' ``PGPASSWORD``) as well. It is
thrown away with its directory.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

from service.supervision.ports import free_port

SUPERUSER = "modelrouter"
PASSWORD = "pg-test-secret"
_FAST = ("-c", "fsync=off", "-c", "full_page_writes=off")
"""Tests only: no flush to disk. A killed *server* still loses nothing (the OS has the pages);
only an OS crash would, and no test simulates one. Benchmarks keep the defaults."""


def pg_bin_dir() -> Path | None:
    """The newest installed PostgreSQL's binaries (``initdb``, ``pg_ctl``), or None."""
    found = shutil.which("pg_ctl")  # may be a symlink into /usr/lib/postgresql/<v>/bin, beside psql
    if found is not None and (Path(found).resolve().parent / "psql").exists():
        return Path(found).resolve().parent
    roots = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: int(p.parent.name), reverse=True)
    return next((p for p in roots if (p / "initdb").exists()), None)


def _run_as() -> str | None:
    """The user the server runs as: None (ourselves) unless we are root."""
    return "nobody" if os.geteuid() == 0 else None


class PostgresServer:
    """One ``postgres`` process over a fresh cluster; ``url(db)`` names a database on it."""

    def __init__(self, root: Path | None = None, *, fast: bool = True, port: int | None = None) -> None:
        bindir = pg_bin_dir()
        if bindir is None:
            msg = "PostgreSQL server binaries not found: install Debian's `postgresql` package (make test does)"
            raise RuntimeError(msg)
        self.bindir = bindir
        self._own_root = root is None
        self.root = Path(root) if root is not None else Path(tempfile.mkdtemp(prefix="modelrouter-pg-"))
        self.data = self.root / "data"
        self.port = port or free_port()
        self.fast = fast
        self.user = _run_as()
        self.log_path = self.root / "postgres.log"

    def _cmd(self, argv: Sequence[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
        user = self.user
        done = subprocess.run(
            list(argv), capture_output=True, text=True, check=False, user=user, cwd=self.root, timeout=120
        )
        if check and done.returncode != 0:
            msg = f"{Path(argv[0]).name} failed ({done.returncode}): {done.stderr.strip() or done.stdout.strip()}"
            raise RuntimeError(msg)
        return done

    def init(self) -> PostgresServer:
        """``initdb`` (UTF-8, superuser ``modelrouter``: trusted on the socket, SCRAM over TCP)."""
        self.root.mkdir(parents=True, exist_ok=True)
        if self.user is not None:
            entry = pwd.getpwnam(self.user)
            os.chown(self.root, entry.pw_uid, entry.pw_gid)
        self.root.chmod(0o700)
        password_file = self.root / "initdb-password"
        password_file.write_text(PASSWORD)
        if self.user is not None:
            os.chown(password_file, pwd.getpwnam(self.user).pw_uid, -1)
        initdb = [str(self.bindir / "initdb"), "-D", str(self.data), "-U", SUPERUSER, "-E", "UTF8", "--locale=C"]
        auth = ["--auth-local=trust", "--auth-host=scram-sha-256", f"--pwfile={password_file}"]
        self._cmd([*initdb, *auth, "--no-sync"])
        password_file.unlink()
        return self

    def start(self) -> PostgresServer:
        """Start (or restart after :meth:`stop`) on the same port; returns when it accepts connections."""
        if not self.data.exists():
            self.init()
        options = ["-k", str(self.root), "-p", str(self.port), "-c", "listen_addresses=127.0.0.1"]
        options += ["-c", "max_connections=200", *(_FAST if self.fast else ())]
        ctl = [str(self.bindir / "pg_ctl"), "-D", str(self.data), "-l", str(self.log_path), "-w", "-t", "60"]
        self._cmd([*ctl, "-o", " ".join(options), "start"])
        return self

    def stop(self, mode: str = "fast") -> None:
        """``pg_ctl stop -m fast`` (clean) or ``immediate`` (like a crash: recovery replays the WAL)."""
        self._cmd([str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop"], check=False)

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{SUPERUSER}:{PASSWORD}@127.0.0.1:{self.port}/{database}"

    def tool(self, name: str, *args: str) -> str:
        """Run one of the server's client tools (``psql``, ``pg_dump``...) against it, as its user;
        returns the standard output."""
        argv = [str(self.bindir / name), "-h", str(self.root), "-p", str(self.port), "-U", SUPERUSER, *args]
        return self._cmd(argv).stdout.strip()

    def psql(self, sql: str, database: str = "postgres") -> str:
        """Run ``sql`` with ``psql`` (admin statements: CREATE DATABASE cannot run in a transaction)."""
        return self.tool("psql", "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", "-d", database, "-c", sql)

    def create_database(self, name: str, template: str | None = None) -> str:
        """A new database (a copy of ``template`` when given); returns its URL."""
        suffix = f" TEMPLATE {template}" if template else ""
        self.psql(f"CREATE DATABASE {name}{suffix}")
        return self.url(name)

    def close(self) -> None:
        self.stop("immediate")
        if self._own_root:
            shutil.rmtree(self.root, ignore_errors=True)


@contextlib.contextmanager
def running_postgres(*, fast: bool = True) -> Iterator[PostgresServer]:
    """A started server, stopped and deleted on exit."""
    server = PostgresServer(fast=fast).start()
    try:
        yield server
    finally:
        server.close()
