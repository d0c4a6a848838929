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


def configure_logging(
    *, json: bool | None = None, level: int = logging.INFO, secrets: Iterable[str | None] = (), **bind: object
) -> None:
    """Configure structlog and the stdlib root logger once per process.

    Call it early in each process (service main, CLI tools): cached loggers
    are per process. ``secrets`` (token, API keys) are redacted from every
    line. ``bind`` values (e.g. ``worker="download", job_id=...``) are attached
    to every line of this process."""
    use_json = (not sys.stderr.isatty()) if json is None else json
    shared: list[structlog.types.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer: structlog.types.Processor = (
        structlog.processors.JSONRenderer() if use_json else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    )
    structlog.configure(
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            _TRACEBACKS if use_json else structlog.processors.format_exc_info,
            redactor(secrets),
            renderer,
        ],
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for noisy in ("httpx", "httpcore", "aiosqlite", "huggingface_hub"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    structlog.contextvars.clear_contextvars()
    if bind:
        structlog.contextvars.bind_contextvars(**bind)
