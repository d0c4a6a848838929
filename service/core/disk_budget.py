"""Whether a download fits on disk: one rule, decided before any worker is spawned and checked again
by the worker before its first byte (the disk may have filled in between).

A download that would leave less than the configured reserve free is refused
at once, with the numbers, instead of failing with ENOSPC halfway through (and
filling the disk the event log lives on). Pure: the caller measures free space
and the bytes already on disk.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # only a type here: the download worker imports this module, and not the state's
    from service.core.state import RouterState


@dataclass(frozen=True, slots=True)
class DiskShortfall:
    """A refused download: it needs ``needed`` more bytes, other running jobs will
    still write ``pending``, ``free`` are free now, ``reserve`` must stay free."""

    needed: int
    pending: int
    free: int
    reserve: int

    @property
    def message(self) -> str:
        left = self.free - self.needed - self.pending
        return (
            f"not enough disk space: the download needs {self.needed} more bytes and running downloads "
            f"{self.pending}, with {self.free} bytes free that would leave {left}, "
            f"less than the reserve of {self.reserve} bytes"
        )


def check_disk(
    state: RouterState, model: str, *, total_bytes: int, on_disk: int, free: int, reserve: int
) -> DiskShortfall | None:
    """None when the download of ``model`` may start: it joins a running job (already
    counted), has nothing left to fetch, or leaves at least ``reserve`` bytes free
    once it and every other active job have written what they still need."""
    current = state.models.get(model)
    if current is not None and current.active_job is not None:
        return None
    pending = sum(max(0, job.bytes_total - job.bytes_done) for job in state.all_jobs() if job.status.active)
    return shortfall(needed=max(0, total_bytes - on_disk), free=free, reserve=reserve, pending=pending)


def shortfall(*, needed: int, free: int, reserve: int, pending: int = 0) -> DiskShortfall | None:
    """The rule: ``needed`` more bytes (and ``pending`` of other jobs) must leave ``reserve`` of ``free``."""
    if needed <= 0 or free - needed - pending >= reserve:
        return None
    return DiskShortfall(needed=needed, pending=pending, free=free, reserve=reserve)
