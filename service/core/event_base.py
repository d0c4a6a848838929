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
from typing import Any, ClassVar, TypedDict

from service.core.errors import InvalidEvent

__all__ = [
    "JSON",
    "Event",
    "EventPayload",
    "EventSource",
    "FileRef",
    "Recorded",
    "ServerMeta",
    "StoredFile",
    "coerce_files",
    "required_fields",
]

JSON = Any  # Any: JSON is recursive; each reader narrows the shape it expects
"""A JSON-compatible value (dict, list, str, int, float, bool, None)."""
EventPayload = dict[str, JSON]
"""An event's JSON payload as stored in the log's ``data`` column. Free-form until it is read into its
typed event: each event type's fields narrow it (:meth:`Event.from_data`, :mod:`service.core.upcasting`)."""
EventSource = Mapping[str, JSON]
"""Who wrote an event, as stored in its ``source`` column: ``kind``, ``pid``, the writer's own id and
node. Free-form: the keys vary by writer (a worker names its instance or its download)."""

ServerMeta = Mapping[str, JSON]
"""llama-server's model ``meta`` (vocabulary, context, parameter counts...) as a worker reported it in
``instance_ready``: free-form, kept for the catalogue and shown as it came."""


class StoredFile(TypedDict, total=False):
    """A :class:`FileRef` as the log stores it: ``path`` and ``size`` always, the rest once known."""

    path: str
    size: int
    sha256: str
    blob_path: str
    snapshot_path: str


@dataclass(frozen=True, slots=True)
class Event:
    """Base class: a payload with a stable type name and schema version."""

    TYPE: ClassVar[str] = ""
    VERSION: ClassVar[int] = 1

    def to_data(self) -> EventPayload:
        """The JSON payload stored in the ``data`` column."""
        return {f.name: _jsonable(getattr(self, f.name)) for f in dataclasses.fields(self)}

    @classmethod
    def from_data(cls, data: EventPayload) -> Event:
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

    def to_json(self) -> StoredFile:
        """The stored object."""
        out: StoredFile = {"path": self.path, "size": self.size}
        if self.sha256 is not None:
            out["sha256"] = self.sha256
        if self.blob_path is not None:
            out["blob_path"] = self.blob_path
        if self.snapshot_path is not None:
            out["snapshot_path"] = self.snapshot_path
        return out

    @classmethod
    def of(cls, value: FileRef | StoredFile) -> FileRef:
        """``value`` as a FileRef (a stored or hand-written object is read tolerantly)."""
        if isinstance(value, FileRef):
            return value
        size, sha, blob, link = (
            value.get("size"),
            value.get("sha256"),
            value.get("blob_path"),
            value.get("snapshot_path"),
        )
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
    source: EventSource
    recorded_at: datetime

    @property
    def type(self) -> str:
        """The stable type string of the payload."""
        return self.event.TYPE
