"""Which values never reach a log line, and what replaces them.

Pure and stdlib-only because two loggers share it: the service's structlog
processor (:func:`service.outside.logging_config.redactor`) and the workers' JSON-lines
logger (``workers/runtime/_log.py``), which may import only ``service.core`` and
``service.event_store``. Either way a secret (the Hub token, API keys) is
replaced wherever it appears in a line (issue 11 §1.4).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

REDACTED = "[redacted]"
MIN_SECRET_LENGTH = 4
"""Shorter values would redact ordinary words (and cannot be real tokens)."""


def secret_values(secrets: Iterable[str | None]) -> tuple[str, ...]:
    """The values worth redacting, longest first (so a secret containing another is replaced whole)."""
    return tuple(sorted({s for s in secrets if s and len(s) >= MIN_SECRET_LENGTH}, key=len, reverse=True))


# Any: a log event's values are of any type; strings are redacted, containers walked, the rest kept.
def redact(value: Any, secrets: tuple[str, ...]) -> Any:
    """``value`` with every secret in every string replaced by :data:`REDACTED`,
    walking dicts, lists and tuples (lists come back for both, as JSON would).
    ``secrets`` comes from :func:`secret_values`."""
    if isinstance(value, str):
        for secret in secrets:
            if secret in value:
                value = value.replace(secret, REDACTED)
        return value
    if isinstance(value, dict):
        return {k: redact(v, secrets) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact(v, secrets) for v in value]
    return value
