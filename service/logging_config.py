"""structlog setup shared by the service and the workers.

JSON lines when not on a TTY (or when forced), a console renderer on a TTY.
Standard-library records (uvicorn, alembic, httpx) go through the same
processors so every line has one shape.
"""

from __future__ import annotations

import logging
import sys

import structlog


def configure_logging(*, json: bool | None = None, level: int = logging.INFO, **bind: object) -> None:
    """Configure structlog and the stdlib root logger once per process.

    Call it early in each process (service main, worker main): cached loggers
    are per process. ``bind`` values (e.g. ``worker="download", job_id=...``)
    are attached to every line of this process."""
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
            structlog.processors.dict_tracebacks if use_json else structlog.processors.format_exc_info,
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
