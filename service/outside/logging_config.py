"""structlog setup for the service and its CLI tools.

Workers log through their own lean JSON-lines logger (``workers/runtime/_log.py``:
importing structlog costs a download worker ~0.1 s of start-up) and share the
redaction rule in :mod:`service.core.redaction`.

JSON lines when not on a TTY (or when forced), a console renderer on a TTY.
Standard-library records (uvicorn, alembic, httpx) go through the same
processors so every line has one shape.

Secrets never reach a log line (issue 11 §1.4): tracebacks are rendered
without frame locals (structlog's default dumps them, and a frame holding
``Settings`` carried the Hub token), and a last processor replaces every
configured secret value (HF token, API keys) wherever it appears in a line.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import structlog
from structlog.processors import ExceptionRenderer
from structlog.tracebacks import ExceptionDictTransformer
from structlog.types import EventDict

from service.core.redaction import redact, secret_values

# Frame locals off: they would print whatever objects the failing frames held.
_TRACEBACKS = ExceptionRenderer(ExceptionDictTransformer(show_locals=False))


def redactor(secrets: Iterable[str | None]) -> structlog.types.Processor:
    """A processor replacing each secret value in every string of an event dict
    (nested dicts and lists included: ``dict_tracebacks`` builds those).
    The rule is :mod:`service.core.redaction`, shared with the workers' logger."""
    values = secret_values(secrets)

    def processor(_logger: Any, _name: str, event_dict: EventDict) -> EventDict:
        return dict(redact(event_dict, values)) if values else event_dict

    return processor


def _without(*keys: str) -> structlog.types.Processor:
    """Drop ``keys`` from a console line (llama-server's --no-log-prefix / --no-log-timestamps)."""

    def processor(_logger: Any, _name: str, event_dict: EventDict) -> EventDict:
        for key in keys:
            event_dict.pop(key, None)
        return event_dict

    return processor


def _formatter(
    use_json: bool, colors: bool, secrets: Iterable[str | None], dropped: tuple[str, ...], shared: list[Any]
) -> logging.Formatter:
    renderer: structlog.types.Processor = (
        structlog.processors.JSONRenderer() if use_json else structlog.dev.ConsoleRenderer(colors=colors)
    )
    return structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            _TRACEBACKS if use_json else structlog.processors.format_exc_info,
            redactor(secrets),
            *([_without(*dropped)] if dropped and not use_json else []),
            renderer,
        ],
    )


def configure_logging(
    *,
    json: bool | None = None,
    level: int = logging.INFO,
    secrets: Iterable[str | None] = (),
    file: Path | None = None,
    colors: str = "auto",
    prefix: bool | None = None,
    timestamps: bool | None = None,
    **bind: object,
) -> None:
    """Configure structlog and the stdlib root logger once per process.

    Call it early in each process (service main, CLI tools): cached loggers
    are per process. ``secrets`` (token, API keys) are redacted from every
    line. ``bind`` values (e.g. ``worker="download", job_id=...``) are attached
    to every line of this process. llama-server's log flags: ``file``
    (--log-file: every line also appended there, without colours), ``colors``
    (--log-colors on/off/auto), ``prefix`` and ``timestamps`` (--log-prefix,
    --log-timestamps: False drops the level or the time from console lines;
    None keeps the console format's own; JSON lines always carry both)."""
    use_json = (not sys.stderr.isatty()) if json is None else json
    shared: list[structlog.types.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    structlog.configure(
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    dropped = tuple(key for key, keep in (("level", prefix), ("timestamp", timestamps)) if keep is False)
    on_console = colors == "on" or (colors == "auto" and sys.stderr.isatty())
    handler: logging.Handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_formatter(use_json, on_console, secrets, dropped, shared))
    handlers = [handler]
    if file is not None:
        to_file = logging.FileHandler(file, encoding="utf-8")  # appends, as llama-server's --log-file
        to_file.setFormatter(_formatter(use_json, False, secrets, dropped, shared))
        handlers.append(to_file)
    root = logging.getLogger()
    root.handlers[:] = handlers
    root.setLevel(level)
    for noisy in ("httpx", "httpcore", "aiosqlite", "huggingface_hub"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    structlog.contextvars.clear_contextvars()
    if bind:
        structlog.contextvars.bind_contextvars(**bind)
