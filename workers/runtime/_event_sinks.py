"""Where a worker's events go: the event store, or JSON lines.

The runtime (:class:`workers.runtime._worker_runtime.WorkerRuntime`) hands every typed event
to one sink. The real destination is the service's event store
(``--db`` SQLite file or ``--database-url`` PostgreSQL URL: :class:`StoreSink`
over ``service.event_store.worker_writer.open_writer``);
without a store a worker writes JSON lines (:class:`JsonlSink`) to stdout or
to a file, which :func:`read_jsonl` reads back (tests, benchmarks, runs by
hand). A JSON line carries exactly what the store's ``data`` column would.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Protocol

from service.core.events import Event, EventPayload, EventSource
from service.event_store.worker_writer import open_writer


class EventSink(Protocol):
    """Receives a worker's events. ``emit`` must be durable when it returns (or raise)."""

    def emit(self, event: Event, *, model: str | None) -> None: ...

    def close(self) -> None: ...


class StoreSink:
    """Appends to the event store, one transaction per event, stamped with the worker's source."""

    def __init__(self, db_path: str | Path, source: EventSource) -> None:
        # No SQLAlchemy (~0.2 s per worker start): stdlib sqlite3, or psycopg for a PostgreSQL URL.
        self.writer = open_writer(db_path, source=source)

    def emit(self, event: Event, *, model: str | None) -> None:
        self.writer.emit(event, model=model)

    def close(self) -> None:
        self.writer.close()


class JsonlSink:
    """Writes one ``{"type": ..., "data": {...}}`` line per event with a single ``write(2)``.

    Unbuffered on purpose: a parent reading the pipe or file must see
    ``download_started`` before the worker is killed, not when a buffer fills;
    and one write per line (O_APPEND for files) keeps lines whole even if the
    worker dies mid-stream.
    """

    def __init__(self, fd: int = 1, *, owns_fd: bool = False) -> None:
        self._fd = fd
        self._owns_fd = owns_fd
        self._lock = threading.Lock()

    @classmethod
    def to_fd(cls, fd: int) -> JsonlSink:
        """Write to an inherited descriptor (1 = stdout); the caller keeps ownership."""
        return cls(fd)

    @classmethod
    def to_path(cls, path: str | Path) -> JsonlSink:
        """Append to a file (created if missing)."""
        fd = os.open(os.fspath(path), os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
        return cls(fd, owns_fd=True)

    def emit(self, event: Event, *, model: str | None) -> None:
        record = {"type": event.TYPE, "data": event.to_data()}
        line = (json.dumps(record, separators=(",", ":")) + "\n").encode()
        with self._lock:
            view = memoryview(line)
            while view:
                view = view[os.write(self._fd, view) :]

    def close(self) -> None:
        if self._owns_fd and self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def open_sink(
    db_path: str | None, *, source: EventSource, events_path: str | None = None, stdout_fd: int = 1
) -> EventSink:
    """The sink named on a worker's command line: ``--db`` store, else ``--events`` file, else stdout
    (``stdout_fd``: a private ``dup`` of fd 1 where a library may redirect fd 1 meanwhile)."""
    if db_path:
        return StoreSink(db_path, source)
    if events_path in (None, "-"):
        return JsonlSink(stdout_fd, owns_fd=stdout_fd != 1)
    return JsonlSink.to_path(events_path)


def parse_jsonl(text: str) -> list[tuple[str, EventPayload]]:
    """Events from JSONL text; a torn last line (writer still busy or killed) is skipped."""
    out: list[tuple[str, EventPayload]] = []
    for line in text.splitlines():
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict) and "type" in obj:
            out.append((str(obj["type"]), dict(obj.get("data") or {})))
    return out


def read_jsonl(path: str | Path) -> list[tuple[str, EventPayload]]:
    """All events written so far by a :class:`JsonlSink` to ``path`` ([] if none yet)."""
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return []
    return parse_jsonl(text)
