"""Every line a worker writes: forwarded to the service's log and kept in the worker's own file.

As llama.cpp's router does (``server-models.cpp``: ``LOG("[%5d] %s", port, line)``),
each line of a worker's stdout and stderr reaches the service's log with the
worker's identity as prefix (``[inference:MODEL:INSTANCE] ...``,
``[download:JOB] ...``; in single-model mode the one model's lines bare, as
llama-server prints them: :func:`service.core.server_mode.worker_log_prefix`);
and, as Supervisor does, it is also appended to the worker's file
(:mod:`service.supervision.log_files`).

Levels. A worker writes JSON lines with a ``level`` (``workers/runtime/_log.py``);
llama.cpp's own log arrives as ``{"event": "llama_cpp", "text": ...}``, and
its file gets the text exactly as llama.cpp printed it. On the console,
llama.cpp's info lines (the load log) are DEBUG: llama-server shows them only
at ``-v``. The file keeps every line whatever the console's level, because the
load log is what a person reads when a load goes wrong. Anything else (a
traceback, a C library's print) is INFO.

Never blocking a worker: the event loop only reads the pipes and queues lines;
one writer thread per service writes the files and the console. A stream holds
at most ``max_pending`` lines not written yet (MODELROUTER_WORKER_LOG_MAX_PENDING);
past that, lines are dropped and counted, and the file and the console say how
many (``[modelrouter] N lines dropped``) once the writer catches up. A worker
never waits on a full pipe.

Secrets (the API keys, the Hub token) are replaced in every line before it is
written anywhere (:mod:`service.core.redaction`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import queue
import threading
from collections.abc import Callable, Iterable
from pathlib import Path

from service.core.redaction import redact, secret_values
from service.core.server_mode import ROUTER, ServerMode, worker_log_prefix
from service.supervision.log_files import LogLimits, RotatingFile, enforce_budget, log_dir, log_path

__all__ = ["Forward", "LogStream", "WorkerLogs", "forward_to_service_log", "render"]

Forward = Callable[[str, int, str], None]
"""Where forwarded lines go: ``(prefix, level, text)``, the prefix ``[identity] `` or empty."""
MAX_PENDING_LINES = 10_000
_worker_logger = logging.getLogger("modelrouter.worker")
_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


def forward_to_service_log(prefix: str, level: int, text: str) -> None:
    """The service's log: ``prefix`` then ``text`` at ``level`` (filtered by the console's level)."""
    if _worker_logger.isEnabledFor(level):
        _worker_logger.log(level, "%s%s", prefix, text)


def render(line: str) -> tuple[int, str]:
    """A worker's line as ``(console level, text for the file and the console)``."""
    if line.startswith("{"):
        try:
            record = json.loads(line)
        except ValueError:
            return logging.INFO, line
        if isinstance(record, dict):
            level = _LEVELS.get(str(record.get("level")), logging.INFO)
            if record.get("event") == "llama_cpp" and isinstance(record.get("text"), str):
                return (logging.DEBUG if level == logging.INFO else level), record["text"]
            return level, line
    return logging.INFO, line


class LogStream:
    """One worker's lines on their way to its file and the service's log. :meth:`feed` is called
    on the event loop (the pipe readers); the writer thread does the rest."""

    def __init__(self, logs: WorkerLogs, identity: str, path: Path) -> None:
        self.identity = identity
        self.prefix = worker_log_prefix(logs.mode, identity)  # the mode is known before any worker starts
        self.path = path
        self._logs = logs
        self._file: RotatingFile | None = None  # opened by the writer thread
        self.queued = 0  # lines handed to the writer (event loop only)
        self.written = 0  # lines written (writer thread only)
        self.dropped = 0  # lines dropped because the writer was behind (event loop only)
        self._unreported = 0
        self._closed = False  # a grandchild holding the pipe past the worker's exit writes nowhere

    @property
    def pending(self) -> int:
        return self.queued - self.written

    def feed(self, line: bytes) -> None:
        """Queue one line (without its newline); dropped and counted when too many are pending."""
        if self._closed:
            return
        if self.pending >= self._logs.max_pending:
            self.dropped += 1
            self._unreported += 1
            return
        if self._unreported:
            self._put(f"[modelrouter] {self._unreported} lines dropped (the worker wrote faster than its log)")
            self._unreported = 0
        self._put(line)

    def _put(self, line: bytes | str) -> None:
        self.queued += 1
        self._logs.put((self, line))

    async def close(self) -> None:
        """Write what is queued (and any drop count), close the file; returns once it is on disk."""
        if self._closed:
            return
        self._closed = True
        if self._unreported:
            self._put(f"[modelrouter] {self._unreported} lines dropped (the worker wrote faster than its log)")
            self._unreported = 0
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()

        def settle() -> None:
            if not done.done():
                done.set_result(None)

        def closed() -> None:
            loop.call_soon_threadsafe(settle)

        self._logs.put((self, closed))
        await done

    # --- the writer thread ---------------------------------------------------------

    def _write(self, line: bytes | str) -> None:
        text = line.decode("utf-8", "replace") if isinstance(line, bytes) else line
        text = text.rstrip("\r")
        if self._logs.secrets:
            text = redact(text, self._logs.secrets)
        level, shown = render(text)
        if self._file is None:
            self._file = self._logs.open_file(self.path)
        if self._file.write((shown.rstrip("\n") + "\n").encode("utf-8", "replace")):
            self._logs.rotated()
        self._logs.dirty.add(self._file)
        for part in shown.rstrip("\n").split("\n"):
            self._logs.forward(self.prefix, level, part)

    def _close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._logs.closed(self.path)
            self._file = None


Item = tuple[LogStream, "bytes | str | Callable[[], None]"]


class WorkerLogs:
    """The workers' logs of one service: their directory, limits, and the one writer thread."""

    def __init__(
        self,
        home: Path,
        *,
        limits: LogLimits | None = None,
        secrets: Iterable[str | None] = (),
        forward: Forward = forward_to_service_log,
        max_pending: int = MAX_PENDING_LINES,
    ) -> None:
        self.home = home
        self.directory = log_dir(home)
        self.limits = limits or LogLimits()
        self.secrets = secret_values(secrets)
        self.forward = forward
        self.max_pending = max_pending
        self.mode: ServerMode = ROUTER  # set at start-up once ``-m``/``-hf`` are resolved
        self._queue: queue.SimpleQueue[Item | None] = queue.SimpleQueue()
        self._active: set[Path] = set()
        self.dirty: set[RotatingFile] = set()  # written since the queue was last empty (writer thread)
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def stream(self, identity: str, kind: str, key: str) -> LogStream:
        """A stream for a new worker: ``kind`` ``instance`` or ``download``, ``key`` its id."""
        return LogStream(self, identity, log_path(self.home, kind, key))

    def path(self, kind: str, key: str) -> Path:
        """Where the log of worker ``kind``/``key`` is (whether or not it exists)."""
        return log_path(self.home, kind, key)

    def put(self, item: Item) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="worker-logs", daemon=True)
                self._thread.start()
        self._queue.put(item)

    def close(self) -> None:
        """Stop the writer thread once it has written what is queued."""
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is not None:
            self._queue.put(None)
            thread.join(timeout=10.0)

    # --- called on the writer thread ---------------------------------------------

    def open_file(self, path: Path) -> RotatingFile:
        self._active.add(path)
        opened = RotatingFile(path, self.limits)
        self.rotated()
        return opened

    def closed(self, path: Path) -> None:
        self._active.discard(path)
        self.dirty = {f for f in self.dirty if f.path != path}

    def rotated(self) -> None:
        """A file opened or rotated: keep all workers' files within the budget, oldest first."""
        enforce_budget(self.directory, self.limits.budget_bytes, self._active)

    def _run(self) -> None:
        while True:
            if self.dirty and self._queue.empty():  # caught up: what was written becomes readable
                for written in self.dirty:
                    written.flush()
                self.dirty.clear()
            item = self._queue.get()
            if item is None:
                return
            stream, payload = item
            try:
                if callable(payload):
                    stream._close()
                else:
                    stream._write(payload)
            except Exception:  # a full disk must not stop the other workers' logs
                logging.getLogger(__name__).exception("worker_log_write_failed", exc_info=True)
            finally:
                if callable(payload):
                    payload()
                else:
                    stream.written += 1
