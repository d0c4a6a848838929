"""A small filesystem of its own (tmpfs) that a test can fill to the last byte and free again.

A full disk is a fault of the filesystem, so it is made with one: ``mount -t tmpfs -o size=N``
on a fresh directory, which needs root (or ``CAP_SYS_ADMIN``). Tests and CI run as root; where
mounting is refused, :func:`small_disk` raises :class:`CannotMount` with the reason, which the
tests turn into a skip that says so. :meth:`SmallDisk.fill` writes one file until the kernel
answers ``ENOSPC``; :meth:`SmallDisk.free` deletes it.

"Full" for an event log means more than no room for a new file: SQLite rewrites a WAL it
checkpointed, and PostgreSQL fills the free room of a table's last page, before either needs a
new byte. :func:`fill_log` therefore fills the disk, then appends the smallest events it can
until the log's own writer refuses one with ``LogDiskFull``: from then on every append needs
space the disk does not have.
"""

from __future__ import annotations

import contextlib
import errno
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from service.core import events as ev
from service.event_store.codec import NewEvent
from service.event_store.rows import LogDiskFull
from service.event_store.worker_writer import open_writer


class CannotMount(RuntimeError):
    """This process may not mount a filesystem (not root, or no ``CAP_SYS_ADMIN`` in a container)."""


class SmallDisk:
    """A mounted tmpfs at :attr:`root`."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.filler = root / "filler"

    def fill(self) -> int:
        """Write :attr:`filler` until the filesystem has no byte left; returns the bytes written."""
        written = 0
        fd = os.open(self.filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            for chunk in (1 << 20, 1 << 12, 1):  # big writes first, then down to the last byte
                block = b"\0" * chunk
                while True:
                    try:
                        written += os.write(fd, block)
                    except OSError as exc:
                        if exc.errno != errno.ENOSPC:
                            raise
                        break
        finally:
            os.close(fd)
        return written

    def free(self) -> None:
        """Give the space back."""
        self.filler.unlink(missing_ok=True)

    def available(self) -> int:
        """Bytes free for an unprivileged writer."""
        stats = os.statvfs(self.root)
        return stats.f_bavail * stats.f_frsize


@contextlib.contextmanager
def small_disk(size_bytes: int, *, owner: str | None = None) -> Iterator[SmallDisk]:
    """A tmpfs of ``size_bytes`` mounted on a new directory (owned by the user ``owner``, e.g. the
    PostgreSQL server's), unmounted and removed on exit."""
    root = Path(tempfile.mkdtemp(prefix="modelrouter-small-disk-"))
    options = f"size={size_bytes},mode=0755"
    if owner is not None:
        entry = pwd.getpwnam(owner)
        options = f"size={size_bytes},mode=0700,uid={entry.pw_uid},gid={entry.pw_gid}"
    try:
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(root)], capture_output=True, text=True, check=False
        )
        why = done.stderr.strip() or f"exit status {done.returncode}" if done.returncode != 0 else None
    except OSError as exc:  # no mount(8) at all
        why = str(exc)
    if why is not None:
        root.rmdir()
        raise CannotMount(f"cannot mount a tmpfs (needs root or CAP_SYS_ADMIN): {why}")
    try:
        yield SmallDisk(root)
    finally:
        subprocess.run(["umount", "--lazy", str(root)], capture_output=True, check=False)
        shutil.rmtree(root, ignore_errors=True)


def fill_log(disk: SmallDisk, location: Path | str, limit: int = 100_000) -> LogDiskFull:
    """Fill ``disk``, then the room the log at ``location`` (on that disk: its SQLite file, or a
    tablespace holding its ``events``) still has; returns the writer's refusal."""
    writer = open_writer(location, source={"kind": "test_filler"})  # first: opening needs room too
    disk.fill()
    try:
        for _ in range(limit):
            try:
                writer.append([NewEvent(ev.PartialFileRemoved(path="/f", bytes=0))])
            except LogDiskFull as exc:
                return exc
    finally:
        writer.close()
    msg = f"the log took {limit} events on a full disk"
    raise AssertionError(msg)
