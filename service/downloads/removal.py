"""Delete a model's files from the HF cache, as a :class:`RemovalPlan` says.

The plan (``service/core/removal.py``) was decided over the log. Before a blob
goes, the links left in its repo folder are checked once more, so that a blob
a snapshot the log never saw still points at (``hf download`` into a shared
cache, say) is kept. Empty snapshot folders are removed too.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from service.core.cache_layout import CachePaths
from service.core.removal import RemovalPlan


@dataclass(frozen=True, slots=True)
class Removal:
    files: tuple[str, ...]
    bytes_freed: int


def _linked_blobs(repo_dir: Path) -> set[str]:
    linked: set[str] = set()
    snapshots = repo_dir / "snapshots"
    if snapshots.is_dir():
        for link in snapshots.rglob("*"):
            if link.is_symlink():
                linked.add(Path(os.readlink(link)).name)
    return linked


def remove_files(cache_dir: Path, plan: RemovalPlan) -> Removal:
    """Delete the plan's snapshot links, then each of its blobs no remaining link
    uses, then empty snapshot folders."""
    paths = CachePaths(cache_dir, plan.repo)
    removed: list[str] = []
    freed = 0
    for text in plan.links:
        link = Path(text)
        try:
            link.unlink()
        except FileNotFoundError:  # already gone: a removal is idempotent
            continue
        removed.append(text)
    still_used = _linked_blobs(paths.repo_dir)
    for text in plan.blobs:
        blob = Path(text)
        if blob.name in still_used:
            continue
        try:
            size = blob.stat().st_size
            blob.unlink()
        except FileNotFoundError:
            continue
        freed += size
        removed.append(text)
    _prune_empty(paths.repo_dir / "snapshots" / plan.commit if plan.commit else None)
    return Removal(files=tuple(removed), bytes_freed=freed)


def _prune_empty(snapshot_dir: Path | None) -> None:
    if snapshot_dir is None or not snapshot_dir.is_dir():
        return
    for folder in sorted((p for p in snapshot_dir.rglob("*") if p.is_dir()), reverse=True):
        if not any(folder.iterdir()):
            folder.rmdir()
    if not any(snapshot_dir.iterdir()):
        snapshot_dir.rmdir()
