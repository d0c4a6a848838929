"""Per-worker log files under the data dir: size rotation and a budget across workers.

One file per inference instance (``instance-<id>.log``) or download job
(``download-<job id>.log``) in ``<home>/logs/workers/``, as Supervisor keeps
``stdout_logfile`` per program: a file grows to ``max_bytes``, then moves to
``.1`` (``.1`` to ``.2``, ... the last of ``backups`` is deleted), and the files
of all workers together stay under ``budget_bytes``: when a new file opens or
one rotates, the oldest files (by modification time) are deleted first, never
a file a worker is writing now.

Only the writer thread of :mod:`service.supervision.worker_logs` calls
:meth:`RotatingFile.write`; the reading helpers (:func:`tail_lines`) may run
anywhere, since a reader tolerates a line being written meanwhile.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

__all__ = ["LogLimits", "RotatingFile", "enforce_budget", "log_dir", "log_path", "tail_lines", "tail_offset"]

_SAFE = re.compile(r"[^A-Za-z0-9._-]")


@dataclass(frozen=True, slots=True)
class LogLimits:
    """Sizes of the per-worker logs (Supervisor's ``logfile_maxbytes``/``logfile_backups``)."""

    max_bytes: int = 10 * 1024 * 1024
    """A file rotates once it would grow past this."""
    backups: int = 3
    """Rotated files kept per worker (``.1`` the newest)."""
    budget_bytes: int = 256 * 1024 * 1024
    """All workers' files together; the oldest are deleted first."""


def log_dir(home: Path) -> Path:
    """Where the workers' logs are: ``<home>/logs/workers``."""
    return home / "logs" / "workers"


def log_path(home: Path, kind: str, key: str) -> Path:
    """The log file of one worker: ``kind`` is ``instance`` or ``download``, ``key`` its id."""
    return log_dir(home) / f"{kind}-{_SAFE.sub('_', key)}.log"


class RotatingFile:
    """An append-only file that rotates at ``limits.max_bytes`` (binary, line-at-a-time writes)."""

    def __init__(self, path: Path, limits: LogLimits) -> None:
        self.path = path
        self.limits = limits
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(path, "ab")  # noqa: SIM115 - held open for the worker's life, closed by close()
        self.size = self._file.tell()

    def write(self, data: bytes) -> bool:
        """Append ``data`` (whole lines); True when the file rotated first."""
        rotated = False
        if self.size and self.size + len(data) > self.limits.max_bytes:
            self._rotate()
            rotated = True
        self._file.write(data)
        self.size += len(data)
        return rotated

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._file.close()

    def _rotate(self) -> None:
        self._file.close()
        backups = self.limits.backups
        for n in range(backups, 0, -1):
            older = self.path.with_name(f"{self.path.name}.{n}")
            if n == backups:
                older.unlink(missing_ok=True)
            elif older.exists():
                older.rename(self.path.with_name(f"{self.path.name}.{n + 1}"))
        if backups > 0:
            self.path.rename(self.path.with_name(f"{self.path.name}.1"))
        else:
            self.path.unlink(missing_ok=True)
        self._file = open(self.path, "ab")  # noqa: SIM115 - see __init__
        self.size = 0


def enforce_budget(directory: Path, budget_bytes: int, active: Collection[Path]) -> list[Path]:
    """Delete the oldest files in ``directory`` until they total at most ``budget_bytes``;
    files in ``active`` (being written) are never deleted. Returns what was deleted."""
    entries: list[tuple[float, int, Path]] = []
    with contextlib.suppress(FileNotFoundError):
        for entry in os.scandir(directory):
            with contextlib.suppress(FileNotFoundError):
                if entry.is_file():
                    info = entry.stat()
                    entries.append((info.st_mtime, info.st_size, Path(entry.path)))
    total = sum(size for _, size, _ in entries)
    deleted: list[Path] = []
    keep = {Path(p) for p in active}
    for _, size, path in sorted(entries):
        if total <= budget_bytes:
            break
        if path in keep:
            continue
        path.unlink(missing_ok=True)
        total -= size
        deleted.append(path)
    return deleted


def tail_lines(path: Path, n: int, *, max_bytes: int = 1 << 20) -> list[str]:
    """The last ``n`` lines of ``path`` (reading at most ``max_bytes`` from its end; the rotated
    ``.1`` file too when the current one holds fewer). Empty when there is no such file."""
    lines: list[str] = []
    for candidate in (path, path.with_name(path.name + ".1")):
        try:
            with open(candidate, "rb") as f:
                f.seek(0, os.SEEK_END)
                size = f.tell()
                f.seek(max(0, size - max_bytes))
                data = f.read()
        except FileNotFoundError:
            continue
        chunk = data.decode("utf-8", "replace").splitlines()
        if size > max_bytes and chunk:
            chunk = chunk[1:]  # the first line was cut by the seek
        lines = chunk + lines
        if len(lines) >= n:
            break
    return lines[-n:] if n > 0 else []


def tail_offset(path: Path, n: int, *, max_bytes: int = 1 << 20) -> int:
    """The byte offset in ``path`` where its last ``n`` whole lines begin (0: the file holds
    fewer, or does not exist yet); a follower starts there (``GET /logs/stream``)."""
    try:
        with open(path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            start = max(0, size - max_bytes)
            f.seek(start)
            data = f.read()
    except FileNotFoundError:
        return 0
    end = len(data) - 1 if data.endswith(b"\n") else len(data)  # a last line being written counts too
    cut = end
    for _ in range(max(n, 0)):
        cut = data.rfind(b"\n", 0, cut)
        if cut < 0:
            return start if start == 0 else start + data.find(b"\n") + 1
    return start + cut + 1
