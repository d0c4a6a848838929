"""Where a worker's events go (shared by the download and inference workers).

A worker only ever calls ``sink.emit(type, data)``. The real destination is the
service's SQLite event store (``--db``, via ``service.event_store.worker_writer``);
without a store a worker writes JSON lines (:class:`JsonlSink`) to stdout or to
a file, which :func:`read_jsonl` reads back.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class EventSink(Protocol):
    """Receives worker events. ``emit`` must be durable when it returns (or raise).

    Positional-only so that any ``emit(type_, data)`` implementation fits.
    """

    def emit(self, type_: str, data: dict[str, Any], /) -> None: ...


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

    def emit(self, type_: str, data: dict[str, Any], /) -> None:
        line = (json.dumps({"type": type_, "data": data}, separators=(",", ":")) + "\n").encode()
        with self._lock:
            view = memoryview(line)
            while view:
                view = view[os.write(self._fd, view) :]

    def close(self) -> None:
        if self._owns_fd and self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def parse_jsonl(text: str) -> list[tuple[str, dict[str, Any]]]:
    """Events from JSONL text; a torn last line (writer still busy or killed) is skipped."""
    out: list[tuple[str, dict[str, Any]]] = []
    for line in text.splitlines():
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict) and "type" in obj:
            out.append((str(obj["type"]), dict(obj.get("data") or {})))
    return out


def read_jsonl(path: str | Path) -> list[tuple[str, dict[str, Any]]]:
    """All events written so far by a :class:`JsonlSink` to ``path`` ([] if none yet)."""
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return []
    return parse_jsonl(text)


def open_sink(db_path: str | None, *, model: str, source: dict[str, Any], events_path: str | None = None) -> EventSink:
    """The sink for a worker process.

    With ``db_path``: the SQLite event store (``WriterSink`` bound to ``model``,
    each event stamped with ``source``). Otherwise JSON lines to
    ``events_path``, or to stdout when that is None or "-".
    """
    if db_path:
        # The stdlib-only writer: SQLAlchemy would add ~0.2 s to every worker start.
        from service.event_store.worker_writer import WorkerEventWriter, WriterSink

        return WriterSink(WorkerEventWriter(db_path, source=source), model)
    if events_path in (None, "-"):
        return JsonlSink.to_fd(1)
    return JsonlSink.to_path(events_path)
