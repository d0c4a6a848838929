"""The workers' log: one JSON object per line on a private duplicate of stderr.

Why not structlog, the service's logger: importing it costs ~0.1 s, which
every download job would pay at start-up, and a worker needs five methods.
The methods have structlog's shape (``log.info("event", key=value)``,
``bind``, ``exception``), so code written against the service's logger reads
the same here. Why a duplicate of fd 2: llama-cpp-python points fd 2 at
``/dev/null`` while it loads a model. One ``write(2)`` per line keeps lines
whole in the stderr tail the service keeps for crash reports.

Secrets never reach a line: every configured value (``HF_TOKEN`` by default,
see :func:`workers.runtime._worker_runtime.worker_secrets`) is replaced in the finished line,
its JSON-escaped form included, by the rule the service's logger uses
(:mod:`service.core.redaction`); tracebacks carry no frame locals.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
import traceback
from collections.abc import Iterable, Mapping
from typing import Any

from service.core.redaction import redact, secret_values

LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40}


LogFields = Mapping[str, object]
"""A log line's key-value pairs: free-form, any value ``json.dumps`` can write (others as ``str``)."""


class WorkerLog:
    """A bound JSON-lines logger; :meth:`bind` returns a child sharing the same descriptor."""

    def __init__(
        self,
        fd: int,
        *,
        level: str = "info",
        secrets: Iterable[str | None] = (),
        context: LogFields | None = None,
        _lock: threading.Lock | None = None,
    ) -> None:
        self._fd = fd
        self._min = LEVELS[level]
        values = secret_values(secrets)
        # A secret with quotes or backslashes appears escaped inside the JSON line.
        self._secrets = secret_values([*values, *(json.dumps(v)[1:-1] for v in values)])
        self._context = dict(context or {})
        self._lock = _lock or threading.Lock()

    @classmethod
    def to_stderr(cls, *, level: str = "info", secrets: Iterable[str | None] = (), **context: Any) -> WorkerLog:
        """A logger on a private ``dup`` of fd 2 (see the module docstring)."""
        return cls(os.dup(2), level=level, secrets=secrets, context=context)

    def bind(self, **context: Any) -> WorkerLog:
        """A logger adding ``context`` to every line."""
        child = WorkerLog(self._fd, _lock=self._lock, context={**self._context, **context})
        child._min, child._secrets = self._min, self._secrets
        return child

    def debug(self, event: str, **fields: Any) -> None:
        self._line(10, "debug", event, fields)

    def info(self, event: str, **fields: Any) -> None:
        self._line(20, "info", event, fields)

    def warning(self, event: str, **fields: Any) -> None:
        self._line(30, "warning", event, fields)

    def error(self, event: str, **fields: Any) -> None:
        self._line(40, "error", event, fields)

    def exception(self, event: str, **fields: Any) -> None:
        """``error`` plus the traceback being handled (text only, no frame locals)."""
        self._line(40, "error", event, {**fields, "exception": traceback.format_exc()})

    def _line(self, rank: int, level: str, event: str, fields: LogFields) -> None:
        if rank < self._min:
            return
        now = time.time()
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1e6):06d}Z"
        record = {"event": event, "level": level, "timestamp": stamp, **self._context, **fields}
        text = json.dumps(record, default=str, ensure_ascii=False)
        line = (redact(text, self._secrets) if self._secrets else text) + "\n"
        view = memoryview(line.encode("utf-8", errors="replace"))
        with self._lock, contextlib.suppress(OSError):  # a closed stderr must not kill the worker
            while view:
                view = view[os.write(self._fd, view) :]
