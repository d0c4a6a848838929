"""Domain errors raised by the pure core.

    CoreError
     +-- UnknownEventType        a stored type this code does not know
     +-- UnknownSchemaVersion    a version newer than this code, or no upcaster
     +-- InvalidEvent            an event being written: unknown or missing fields, or not a registered class
     +-- CommandRejected         a decision refused a request (carries a code)

The API maps ``CommandRejected.code`` to an HTTP status and a problem type.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class CoreError(Exception):
    """Base of all errors raised by ``service.core``."""


class UnknownEventType(CoreError):
    def __init__(self, type_: str) -> None:
        super().__init__(f"unknown event type {type_!r}")
        self.type = type_


class UnknownSchemaVersion(CoreError):
    def __init__(self, type_: str, version: int, current: int) -> None:
        super().__init__(f"event {type_!r} has schema_version {version}; this code reads up to {current}")
        self.type = type_
        self.version = version
        self.current = current


class InvalidEvent(CoreError, ValueError):
    """Raised when an event is *written*, never when stored events are read
    (reading tolerates unknown keys so that older code reads newer logs)."""

    def __init__(
        self, type_: str, *, unknown: Sequence[str] = (), missing: Sequence[str] = (), reason: str = ""
    ) -> None:
        parts = [reason] if reason else []
        if unknown:
            parts.append(f"unknown fields {', '.join(unknown)}")
        if missing:
            parts.append(f"missing required fields {', '.join(missing)}")
        super().__init__(f"event {type_!r}: {'; '.join(parts)}")
        self.type = type_
        self.unknown = list(unknown)
        self.missing = list(missing)


class CommandRejected(CoreError):
    """A command that cannot be carried out in the current state."""

    def __init__(self, code: str, message: str, **extra: Any) -> None:  # Any: problem members, JSON
        super().__init__(message)
        self.code = code
        self.message = message
        self.extra = extra
