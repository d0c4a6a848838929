"""The Hugging Face cache layout, as the download worker writes it.

Same layout as huggingface_hub and llama.cpp (so both can use what we fetch,
and ``huggingface_hub.scan_cache_dir()`` lists it)::

    <cache>/CACHEDIR.TAG
    <cache>/.locks/models--user--repo/<sha256>.lock
    <cache>/models--user--repo/blobs/<sha256>               verified content
    <cache>/models--user--repo/blobs/<sha256>.incomplete    partial, resumable
    <cache>/models--user--repo/snapshots/<commit>/<path>    relative symlink to the blob
    <cache>/models--user--repo/refs/<revision>              the commit

Differences from huggingface_hub >= 1.18 (peers.md D1): the partial has a
deterministic name (``<sha256>.incomplete``, not a per-process one) so that
any later worker resumes it, and it is never deleted on failure. The lock
path is huggingface_hub's, so an ``hf_hub_download`` of the same blob in
another process waits for us instead of writing the same file. The path
arithmetic (:class:`CachePaths`) lives in :mod:`service.core.cache_layout`,
shared with the service.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from pathlib import Path

from service.core.cache_layout import CachePaths, repo_folder_name

__all__ = [
    "CachePaths",
    "LockHeld",
    "acquire_lock",
    "ensure_dirs",
    "link_snapshot",
    "publish_blob",
    "release_lock",
    "repo_folder_name",
    "write_ref",
]

_CACHEDIR_TAG = (
    "Signature: 8a477f597d28d172789f06886806bc55\n"
    "# This file is a cache directory tag created by modelrouter.\n"
    "# For information about cache directory tags, see https://bford.info/cachedir/\n"
)


class LockHeld(Exception):
    """Another process holds the lock of a blob we must write."""


def ensure_dirs(paths: CachePaths) -> None:
    """Create ``blobs/`` and the lock directory, and tag the cache root (CACHEDIR.TAG)."""
    paths.blobs_dir.mkdir(parents=True, exist_ok=True)
    paths.lock("x").parent.mkdir(parents=True, exist_ok=True)
    tag = paths.cache_dir / "CACHEDIR.TAG"
    if not tag.exists():
        with contextlib.suppress(OSError):  # cosmetic; never fail a download over it
            _write_atomic(tag, _CACHEDIR_TAG)


def acquire_lock(path: Path) -> int:
    """Take an exclusive ``flock`` without waiting; return the fd to keep it.

    Fail fast (:class:`LockHeld`) rather than wait: the service deduplicates
    jobs, so a held lock means something is wrong, and a worker that silently
    waits looks exactly like a stalled download. The kernel drops the lock
    when the process dies, even on SIGKILL, so no stale locks are left.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o664)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise LockHeld(f"another process is writing this blob (lock held: {path})") from exc
        raise
    return fd


def release_lock(fd: int) -> None:
    try:
        fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def publish_blob(incomplete: Path, blob: Path) -> None:
    """Atomically turn a verified partial into the blob (the caller fsynced it)."""
    os.replace(incomplete, blob)
    _fsync_dir(blob.parent)


def link_snapshot(paths: CachePaths, commit: str, path: str, sha256: str) -> Path:
    """Point ``snapshots/<commit>/<path>`` at the blob with a relative symlink, atomically."""
    link = paths.snapshot(commit, path)
    link.parent.mkdir(parents=True, exist_ok=True)
    target = os.path.relpath(paths.blob(sha256), link.parent)
    if link.is_symlink() and os.readlink(link) == target:
        return link
    tmp = link.with_name(f".{link.name}.{os.getpid()}.tmp")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    os.symlink(target, tmp)
    os.replace(tmp, link)
    return link


def write_ref(paths: CachePaths, revision: str, commit: str) -> None:
    """Record ``refs/<revision>``; skipped when the revision is the commit itself (as HF does)."""
    if revision == commit:
        return
    _write_atomic(paths.ref(revision), commit)


def _write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
