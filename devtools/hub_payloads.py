"""JSON bodies and header parsing of the fake Hub (:mod:`devtools.hub_server`).

Kept apart from the HTTP handler so the Hub's response shapes (what
huggingface_hub 2.4.0 and llama.cpp parse) can be read in one place.
"""

from __future__ import annotations

import hashlib
from typing import Any

from devtools.hub_repos import RepoInfo

_TIMESTAMP = "2026-01-01T00:00:00.000Z"


def bearer_token(header: str | None) -> str | None:
    if header and header.lower().startswith("bearer "):
        return header[7:].strip() or None
    return None


def parse_range(value: str, size: int) -> tuple[int, int] | None:
    """``bytes=a-b`` / ``bytes=a-`` / ``bytes=-n`` → inclusive (start, end); None if unsatisfiable."""
    unit, _, spec = value.partition("=")
    if unit.strip().lower() != "bytes" or "," in spec:
        return None
    first, _, last = spec.strip().partition("-")
    try:
        if first == "":
            n = int(last)
            return (max(0, size - n), size - 1) if n > 0 and size > 0 else None
        start = int(first)
        end = int(last) if last else size - 1
    except ValueError:
        return None
    if start >= size or end < start:
        return None
    return start, min(end, size - 1)


def model_json(info: RepoInfo, blobs: bool) -> dict[str, Any]:
    siblings: list[dict[str, Any]] = []
    for f in info.files:
        sib: dict[str, Any] = {"rfilename": f.path}
        if blobs:
            sib.update(size=f.size, blobId=f.oid)
            if f.lfs:
                sib["lfs"] = {"sha256": f.sha256, "size": f.size, "pointerSize": f.pointer_size}
        siblings.append(sib)
    return {
        "_id": hashlib.sha1(info.repo_id.encode()).hexdigest()[:24],
        "id": info.repo_id,
        "modelId": info.repo_id,
        "author": info.repo_id.split("/")[0],
        "sha": info.commit,
        "lastModified": _TIMESTAMP,
        "createdAt": _TIMESTAMP,
        "private": info.private,
        "gated": info.gated,
        "disabled": False,
        "downloads": 0,
        "likes": 0,
        "library_name": "gguf",
        "tags": ["gguf"],
        "siblings": siblings,
        "usedStorage": info.total_size,
    }


def tree_json(info: RepoInfo, sub: str, recursive: bool) -> list[dict[str, Any]]:
    prefix = f"{sub}/" if sub else ""
    entries: dict[str, dict[str, Any]] = {}
    for f in info.files:
        if not f.path.startswith(prefix):
            continue
        rel_parts = f.path[len(prefix) :].split("/")
        # Directories between ``sub`` and the file (only the first level unless recursive).
        for depth in range(1, len(rel_parts) if recursive else min(2, len(rel_parts))):
            d = prefix + "/".join(rel_parts[:depth])
            entries.setdefault(d, {"type": "directory", "path": d, "oid": hashlib.sha1(d.encode()).hexdigest()})
        if recursive or len(rel_parts) == 1:
            item: dict[str, Any] = {"type": "file", "path": f.path, "size": f.size, "oid": f.oid}
            if f.lfs:
                item["lfs"] = {"oid": f.sha256, "size": f.size, "pointerSize": f.pointer_size}
            entries[f.path] = item
    return [entries[k] for k in sorted(entries)]
