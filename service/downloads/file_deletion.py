"""Delete a model's files from the HF cache, as a :class:`RemovalPlan` says.

The plan (``service/core/removal_plan.py``) was decided over the log. Before a blob
goes, the links left in its repo folder are checked once more, so that a blob
a snapshot the log never saw still points at (``hf download`` into a shared
cache, say) is kept. Empty snapshot folders are removed too.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from service.core.cache_layout import CachePaths
from service.core.removal_plan import RemovalPlan


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


def _repo_dirs(cache_dir: Path, plan: RemovalPlan) -> list[Path]:
    """The repo folders the plan's links live in: a model found in llama.cpp's cache
    lives there, not in our download cache."""
    found = [CachePaths(cache_dir, plan.repo).repo_dir]
    for text in plan.links:
        for parent in Path(text).parents:
            if parent.name.startswith("models--") and parent not in found:
                found.append(parent)
                break
    return found


def _snapshot_dirs(repo_dirs: list[Path], plan: RemovalPlan) -> list[Path]:
    dirs = [d / "snapshots" / plan.commit for d in repo_dirs] if plan.commit else []
    for text in plan.links:
        for parent in Path(text).parents:
            if parent.parent.name == "snapshots" and parent not in dirs:
                dirs.append(parent)
                break
    return dirs


def remove_files(cache_dir: Path, plan: RemovalPlan) -> Removal:
    """Delete the plan's snapshot links, then each of its blobs no remaining link
    uses, then empty snapshot folders."""
    repo_dirs = _repo_dirs(cache_dir, plan)
    removed: list[str] = []
    freed = 0
    for text in plan.links:
        link = Path(text)
        try:
            info = link.lstat()
            link.unlink()
        except FileNotFoundError:  # already gone: a removal is idempotent
            continue
        if not stat.S_ISLNK(info.st_mode):
            freed += info.st_size  # a cache without symlinks keeps the bytes in snapshots/
        removed.append(text)
    still_used = set().union(*(_linked_blobs(d) for d in repo_dirs))
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
    for snapshot in _snapshot_dirs(repo_dirs, plan):
        _prune_empty(snapshot)
    return Removal(files=tuple(removed), bytes_freed=freed)


def _prune_empty(snapshot_dir: Path | None) -> None:
    if snapshot_dir is None or not snapshot_dir.is_dir():
        return
    for folder in sorted((p for p in snapshot_dir.rglob("*") if p.is_dir()), reverse=True):
        if not any(folder.iterdir()):
            folder.rmdir()
    if not any(snapshot_dir.iterdir()):
        snapshot_dir.rmdir()
