"""The machinery under the event vocabulary: the base ``Event``, its stored envelope ``Recorded``,
the ``FileRef`` value files are recorded as, and the JSON conversions.

The vocabulary itself (every event type) is :mod:`service.core.events`, which re-exports these.

Pure module: stdlib only, no clock, no ids.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar

from service.core.errors import InvalidEvent

__all__ = ["JSON", "Event", "FileRef", "Recorded", "coerce_files", "required_fields"]

JSON = Any  # Any: JSON is recursive; each reader narrows the shape it expects
"""A JSON-compatible value (dict, list, str, int, float, bool, None)."""


@dataclass(frozen=True, slots=True)
class Event:
    """Base class: a payload with a stable type name and schema version."""

    TYPE: ClassVar[str] = ""
    VERSION: ClassVar[int] = 1

    def to_data(self) -> dict[str, JSON]:
        """The JSON payload stored in the ``data`` column."""
        return {f.name: _jsonable(getattr(self, f.name)) for f in dataclasses.fields(self)}

    @classmethod
    def from_data(cls, data: Mapping[str, JSON]) -> Event:
        """Build from a current-version payload that is about to be *written*.

        Strict: an unknown key or a missing required field raises
        :class:`~service.core.errors.InvalidEvent`, so a misspelt field fails
        at the writer instead of vanishing from the log. Reading stored
        payloads is tolerant instead (:func:`service.core.upcasting.decode`)."""
        unknown = sorted(set(data).difference(f.name for f in dataclasses.fields(cls)))
        missing = [name for name in required_fields(cls) if name not in data]
        if unknown or missing:
            raise InvalidEvent(cls.TYPE, unknown=unknown, missing=missing)
        return cls(**{k: _frozen(v) for k, v in data.items()})


def required_fields(cls: type[Event]) -> tuple[str, ...]:
    """The fields of ``cls`` without a default, in declaration order: what every writer must state."""
    return tuple(
        f.name
        for f in dataclasses.fields(cls)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    )


def _jsonable(value: object) -> JSON:
    if isinstance(value, FileRef):
        return value.to_json()
    if isinstance(value, tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _jsonable(v) for k, v in value.items()}
    return value


def _frozen(value: Any) -> Any:  # Any: a payload value of any field type, frozen as it is
    # Lists become tuples so that events compare and hash like values.
    if isinstance(value, list):
        return tuple(_frozen(v) for v in value)
    return value


@dataclass(frozen=True, slots=True)
class FileRef:
    """One model file as the log records it: its path (in the repo, or on disk for a models dir), its
    size and sha256, and once published in an HF cache, its blob and its snapshot link.

    Stored as a JSON object with these keys (the optional ones only when known, as writers always
    wrote them); read tolerantly (a missing key is its default, an unknown one, such as the ``url``
    older logs kept, is ignored)."""

    path: str
    size: int = 0
    sha256: str | None = None
    blob_path: str | None = None
    snapshot_path: str | None = None

    def to_json(self) -> dict[str, JSON]:
        """The stored object."""
        out: dict[str, JSON] = {"path": self.path, "size": self.size}
        for name in ("sha256", "blob_path", "snapshot_path"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        return out

    @classmethod
    def of(cls, value: FileRef | Mapping[str, JSON]) -> FileRef:
        """``value`` as a FileRef (a stored or hand-written object is read tolerantly)."""
        if isinstance(value, FileRef):
            return value
        size, sha, blob, link = (value.get(k) for k in ("size", "sha256", "blob_path", "snapshot_path"))
        return cls(
            path=str(value.get("path") or ""),
            size=int(size or 0),
            sha256=str(sha) if sha else None,
            blob_path=str(blob) if blob else None,
            snapshot_path=str(link) if link else None,
        )

    @property
    def local_path(self) -> str:
        """Where the file is on disk: its snapshot link in an HF cache, else its own path."""
        return self.snapshot_path or self.path


def coerce_files(event: Event) -> None:
    # Events are built by writers (FileRef values) and by readers of stored payloads (JSON objects);
    # either way the field holds FileRefs.
    files = event.files  # type: ignore[attr-defined]  # called only by the classes that have the field
    if any(not isinstance(f, FileRef) for f in files):
        object.__setattr__(event, "files", tuple(FileRef.of(f) for f in files))


@dataclass(frozen=True, slots=True)
class Recorded:
    """An event as stored: its envelope plus the typed payload."""

    position: int
    event_id: str
    model: str | None
    event: Event
    source: Mapping[str, JSON]
    recorded_at: datetime

    @property
    def type(self) -> str:
        """The stable type string of the payload."""
        return self.event.TYPE
