"""Paths of the Hugging Face cache layout, shared by the service and the download worker.

Path arithmetic only, no I/O (what is on disk: :mod:`service.downloads.cache_files`).

<cache>/models--user--repo/blobs/<sha256>               verified content
<cache>/models--user--repo/blobs/<sha256>.incomplete    partial, resumable
<cache>/models--user--repo/snapshots/<commit>/<path>    relative symlink to the blob
<cache>/models--user--repo/refs/<revision>              the commit
<cache>/.locks/models--user--repo/<sha256>.lock         held while a blob is written
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


def repo_folder_name(repo_id: str) -> str:
    return "models--" + repo_id.replace("/", "--")


@dataclass(frozen=True, slots=True)
class CachePaths:
    """Paths of one model repository inside an HF cache directory."""

    cache_dir: Path
    repo_id: str

    @property
    def repo_dir(self) -> Path:
        return self.cache_dir / repo_folder_name(self.repo_id)

    @property
    def blobs_dir(self) -> Path:
        return self.repo_dir / "blobs"

    def blob(self, sha256: str) -> Path:
        return self.blobs_dir / sha256

    def incomplete(self, sha256: str) -> Path:
        return self.blobs_dir / f"{sha256}.incomplete"

    def lock(self, sha256: str) -> Path:
        return self.cache_dir / ".locks" / repo_folder_name(self.repo_id) / f"{sha256}.lock"

    def snapshot(self, commit: str, path: str) -> Path:
        # Checked lexically: resolve() would follow the existing symlink into blobs/.
        norm = os.path.normpath(path)
        if os.path.isabs(norm) or norm == ".." or norm.startswith("../") or norm == ".":
            msg = f"file path {path!r} escapes the snapshot directory"
            raise ValueError(msg)
        return self.repo_dir / "snapshots" / commit / norm

    def ref(self, revision: str) -> Path:
        return self.repo_dir / "refs" / revision
