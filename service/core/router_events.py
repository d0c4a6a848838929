"""The service's own events: its start and stop, start-up recovery, partial files, and its log
writable again after a full disk.

Kept beside :mod:`service.core.events`, which re-exports them and lists them in its registry;
the catalogue is ``docs/event-catalogue.md`` ("Service"). Pure: stdlib only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from service.core.event_base import Event


@dataclass(frozen=True, slots=True, kw_only=True)
class RouterStarted(Event):
    TYPE: ClassVar[str] = "router_started"
    pid: int
    version: str
    host: str
    port: int


@dataclass(frozen=True, slots=True, kw_only=True)
class RouterStopped(Event):
    TYPE: ClassVar[str] = "router_stopped"
    pid: int
    reason: str = "shutdown"


@dataclass(frozen=True, slots=True, kw_only=True)
class RecoveryCompleted(Event):
    TYPE: ClassVar[str] = "recovery_completed"
    interrupted_downloads: int
    resumed_downloads: int
    lost_instances: int
    orphans: int
    events_replayed: int
    snapshot_position: int
    duration_ms: float


@dataclass(frozen=True, slots=True, kw_only=True)
class PartialFileFound(Event):
    TYPE: ClassVar[str] = "partial_file_found"
    path: str
    bytes: int


@dataclass(frozen=True, slots=True, kw_only=True)
class PartialFileRemoved(Event):
    """``modelrouter gc`` deleted a partial file that no job refers to."""

    TYPE: ClassVar[str] = "partial_file_removed"
    path: str
    bytes: int


@dataclass(frozen=True, slots=True, kw_only=True)
class LogWritesResumed(Event):
    """The log accepts appends again after a full disk refused them: appended by the service with
    the first append that lands (its own, or ``/health``'s retry), so the outage is on record.
    ``refused``: the service's appends refused meanwhile (each answered 507 ``log_disk_full``);
    ``outage_ms``: from the first refusal to this append; ``location``: the file or database."""

    TYPE: ClassVar[str] = "log_writes_resumed"
    reason: str = "disk_full"
    refused: int
    outage_ms: float
    location: str
