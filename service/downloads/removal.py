"""Remove a downloaded model's files from the HF cache.

Snapshot links of the model's files go; a blob goes only when no snapshot
link in the repo still points at it (another quant or revision may share it).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from service.core.cache_layout import CachePaths


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


def remove_files(cache_dir: Path, repo: str, commit: str, files: Iterable[Mapping[str, Any]]) -> Removal:
    """Delete the snapshot links for ``files`` at ``commit``, then each blob that no
    remaining link uses, plus empty snapshot folders."""
    paths = CachePaths(cache_dir, repo)
    removed: list[str] = []
    freed = 0
    shas = []
    for f in files:
        link = paths.snapshot(commit, str(f["path"]))
        if link.is_symlink() or link.exists():
            link.unlink()
            removed.append(str(link))
        shas.append(str(f.get("sha256", "")))
    still_used = _linked_blobs(paths.repo_dir)
    for sha in shas:
        for blob in (paths.blob(sha), paths.incomplete(sha)):
            if sha and sha not in still_used and blob.exists():
                freed += blob.stat().st_size
                blob.unlink()
                removed.append(str(blob))
    snapshot_dir = paths.repo_dir / "snapshots" / commit
    for folder in (
        sorted((p for p in snapshot_dir.rglob("*") if p.is_dir()), reverse=True) if snapshot_dir.is_dir() else []
    ):
        if not any(folder.iterdir()):
            folder.rmdir()
    if snapshot_dir.is_dir() and not any(snapshot_dir.iterdir()):
        snapshot_dir.rmdir()
    return Removal(files=tuple(removed), bytes_freed=freed)
