"""What crosses a process boundary, as typed values with one way in and one way out.

The service resolves a model on the Hub and hands the download worker a
:class:`DownloadSpec` on its command line (``--spec``, JSON); the worker reads
it back with :meth:`DownloadSpec.from_argv`, strictly, because its values
become file names inside the cache. Both sides use this one class, so the job
is never a dict on either side.

Pure module: stdlib only.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass

from service.core.events import JSON, FileRef

_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_COMMIT = re.compile(r"^[0-9a-f]{40}$")


@dataclass(frozen=True, slots=True)
class SpecFile:
    """One file of a download job: its path in the repo, size, sha256 and the URL to fetch it from."""

    path: str
    size: int
    sha256: str
    url: str | None = None  # huggingface_hub's hf_hub_url for it, pinned to the commit

    def to_json(self) -> dict[str, JSON]:  # a JSON document: the --spec value's
        return {"path": self.path, "size": self.size, "sha256": self.sha256, "url": self.url}

    def ref(self) -> FileRef:
        """The file as the log records it (before it is published)."""
        return FileRef(path=self.path, size=self.size, sha256=self.sha256)


@dataclass(frozen=True, slots=True)
class DownloadSpec:
    """A download job: what to fetch, pinned to one commit, and how much disk it must leave free."""

    repo: str
    revision: str
    commit: str
    quant: str | None
    endpoint: str
    files: tuple[SpecFile, ...]
    reserve_bytes: int = 0  # the disk reserve (MODELROUTER_DISK_RESERVE_BYTES) the worker checks again

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    def refs(self) -> tuple[FileRef, ...]:
        """The files as the log records them."""
        return tuple(f.ref() for f in self.files)

    def with_reserve(self, reserve_bytes: int) -> DownloadSpec:
        """The same job with the disk reserve it must respect."""
        return DownloadSpec(self.repo, self.revision, self.commit, self.quant, self.endpoint, self.files, reserve_bytes)

    def to_json(self) -> dict[str, JSON]:  # a JSON document: the --spec value
        return {
            "repo": self.repo,
            "revision": self.revision,
            "commit": self.commit,
            "quant": self.quant,
            "endpoint": self.endpoint,
            "files": [f.to_json() for f in self.files],
            "total_bytes": self.total_bytes,
            "reserve_bytes": self.reserve_bytes,
        }

    def to_argv(self) -> str:
        """The ``--spec`` value of ``python -m workers.download``."""
        return json.dumps(self.to_json(), separators=(",", ":"))

    @classmethod
    def from_argv(cls, text: str) -> DownloadSpec:
        """Inverse of :meth:`to_argv`; raises ``ValueError`` for anything that is not a valid job."""
        obj = json.loads(text)
        if not isinstance(obj, dict):
            msg = "the spec must be a JSON object"
            raise ValueError(msg)
        return cls.from_json(obj)

    @classmethod
    def from_json(cls, obj: Mapping[str, JSON]) -> DownloadSpec:  # a JSON document, checked here
        """Validate strictly: these values become file names inside the cache."""
        raw_files = obj.get("files")
        if not isinstance(raw_files, list) or not raw_files:
            msg = "spec has no files"
            raise ValueError(msg)
        files = tuple(_spec_file(f) for f in raw_files)
        commit = str(obj.get("commit") or "").lower()
        if not _COMMIT.match(commit):
            msg = f"commit must be 40 hex characters, got {commit!r}"
            raise ValueError(msg)
        revision = str(obj.get("revision") or commit)
        if revision.startswith("/") or ".." in revision.split("/"):
            msg = f"invalid revision {revision!r}"
            raise ValueError(msg)
        quant = obj.get("quant")
        reserve = obj.get("reserve_bytes") or 0
        return cls(
            repo=str(obj["repo"]),
            revision=revision,
            commit=commit,
            quant=str(quant) if quant else None,
            endpoint=str(obj.get("endpoint") or "").rstrip("/"),
            files=files,
            reserve_bytes=int(reserve) if isinstance(reserve, (int, float, str)) else 0,
        )


def _spec_file(raw: JSON) -> SpecFile:
    if not isinstance(raw, dict):
        msg = f"a file must be an object, got {raw!r}"
        raise ValueError(msg)
    path, sha = str(raw.get("path") or ""), str(raw.get("sha256") or "").lower()
    size = int(raw.get("size") or 0) if isinstance(raw.get("size"), (int, float, str)) else -1
    if not _SHA256.match(sha) or size < 0:
        msg = f"file {path!r}: sha256 must be 64 hex characters and size >= 0"
        raise ValueError(msg)
    if not path or path.startswith("/") or ".." in path.split("/"):
        msg = f"invalid file path {path!r}"
        raise ValueError(msg)
    url = raw.get("url")
    return SpecFile(path=path, size=size, sha256=sha, url=str(url) if url else None)
