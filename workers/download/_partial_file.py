"""The partial blob file: appended by the main thread, hashed behind it by a thread, flushed early.

Why a hashing thread: sha256 costs ~0.5 s of CPU per GiB, as much as receiving
and writing together. hashlib releases the GIL on large buffers, so a second
thread hashes while the main thread waits on the socket and writes; on two
cores the hash stops adding to the download time.

Why the hasher reads the *file* (``preadv`` of what was written, still in the
page cache) instead of the receive buffers: the main thread never waits for
the hasher to give a buffer back, resuming needs no separate pass (the hasher
starts at byte 0 of the existing partial while the first new bytes are already
arriving), and what gets verified is exactly what the file holds. The extra
page-cache copy costs ~0.1 s per GiB on the hashing core.

Why ``sync_file_range``: durability needs the fsync before the rename, and an
fsync of 1 GiB of dirty pages at the end is a long wait with the network
idle. Asking the kernel to start writeback every :data:`KICK_BYTES` (async,
Linux only, via ctypes) overlaps the disk writes with the transfer, so the
final fsync only waits for the last few MiB. Nothing else depends on it: where
it is missing, the final fsync does all the work as before.

Why writes of at most :data:`WRITE_PIECE` (64 KiB) even from bigger buffers:
the page cache allocates a folio as large as the write (ext4 large folios), and
on this project's VMs high-order free memory has usually been handed back to
the host, so 256 KiB-1 MiB writes ran at ~0.8 GB/s against ~5 GB/s for 64 KiB
ones (measured, 1 GiB, after a 3 s pause). 16k more syscalls per GiB cost ~20 ms.

Every byte is hashed exactly once, in file order; :meth:`PartialFile.digest`
waits until the hasher has covered everything written.
"""

from __future__ import annotations

import errno
import hashlib
import os
import signal
import threading
from collections.abc import Callable
from typing import Any

from workers.download._interrupts import Interrupts

HASH_BLOCK = 128 << 10  # read back and hashed at a time: fits in L2, unlike multi-MiB blocks
WRITE_PIECE = 64 << 10  # largest single write (see the module docstring)
KICK_BYTES = 32 << 20  # start writeback each time this much more was written
DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EFBIG, errno.EDQUOT})
_SIGNALS = {signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGUSR2}


class DiskFull(Exception):
    """A write failed with ENOSPC, EFBIG or EDQUOT; ``have`` bytes are on disk."""

    def __init__(self, err: OSError, have: int) -> None:
        super().__init__(f"cannot write: {os.strerror(err.errno or 0)} after {have} bytes")
        self.have = have


class PartialFile:
    """``<sha256>.incomplete``: a prefix of the blob, ``have`` bytes long, hashed up to ``have`` on demand."""

    def __init__(self, path: str, size: int, *, fsync: bool = True) -> None:
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            have = os.fstat(self.fd).st_size
            if have > size:
                os.ftruncate(self.fd, 0)  # longer than the file can be: not ours to trust
                have = 0
        except BaseException:
            os.close(self.fd)
            raise
        self.have = have
        self._kick = _sync_file_range() if fsync else None
        self._kicked = have
        self._hasher = _Hasher(self.fd, have)  # starts with the bytes already there

    def write(self, data: memoryview) -> None:
        """Append ``data`` (``have`` grows as it goes).

        Raises :class:`DiskFull` or another ``OSError``; ``have`` then counts
        the bytes that did reach the file, and the hasher will cover them.
        """
        done = 0
        while done < len(data):
            try:
                n = os.pwrite(self.fd, data[done : done + WRITE_PIECE], self.have)
            except OSError as exc:
                if exc.errno in DISK_FULL_ERRNOS:
                    self._hasher.advance(self.have)
                    raise DiskFull(exc, self.have) from exc
                raise
            self.have += n
            done += n
        self._hasher.advance(self.have)
        if self._kick is not None and self.have - self._kicked >= KICK_BYTES:
            self._start_writeback()

    def restart(self) -> None:
        """Drop every byte (the server ignored our Range or the partial does not fit): start at 0."""
        self._hasher.stop()
        os.ftruncate(self.fd, 0)
        self.have = self._kicked = 0
        self._hasher = _Hasher(self.fd, 0)

    def digest(self, interrupts: Interrupts) -> str:
        """The sha256 of the whole file once the hasher caught up (cancellable while waiting)."""
        if self._kick is not None:
            self._start_writeback()  # the tail's writeback overlaps the hasher's last blocks
        return self._hasher.result(self.have, interrupts)

    def sync(self) -> None:
        os.fsync(self.fd)

    def close(self) -> None:
        """Stop the hasher (within one block) and close the file; safe to call twice."""
        self._hasher.stop()
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def _start_writeback(self) -> None:
        assert self._kick is not None
        end = self.have & ~0xFFFFF  # whole MiBs: the last, still-growing page is left alone
        if end > self._kicked:
            self._kick(self.fd, self._kicked, end - self._kicked)
            self._kicked = end


class _Hasher:
    """A thread that hashes the file from byte 0 up to the latest ``advance`` target.

    Lock-light on purpose: the main thread only stores the new target (an int,
    atomic under the GIL) and takes the lock to wake the hasher when it sleeps,
    so a 1 GB download costs a few hundred wake-ups, not one per write.
    """

    def __init__(self, fd: int, target: int) -> None:
        self._fd, self._target, self._hashed = fd, target, 0
        self._sha = hashlib.sha256()
        self._error: BaseException | None = None
        self._stopping = self._idle = False
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="sha256", daemon=True)
        self._thread.start()

    def advance(self, target: int) -> None:
        self._target = target
        if self._idle:  # see _wait_for_work: either it sees the new target or we wake it
            with self._cond:
                self._cond.notify_all()

    def result(self, size: int, interrupts: Interrupts) -> str:
        self.advance(size)
        with self._cond:
            while self._hashed < size and self._error is None:
                interrupts.check()
                self._cond.wait(0.1)  # woken when the hasher catches up; a cancel is seen within 0.1 s
        if self._error is not None:
            raise self._error
        return self._sha.hexdigest()

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread is not threading.current_thread():
            self._thread.join()

    def _wait_for_work(self) -> bool:
        """Sleep until there is something to hash; False when stopping."""
        with self._cond:
            self._idle = True  # set before re-reading the target: advance() then cannot miss us
            self._cond.notify_all()  # result() may be waiting for exactly this
            while not self._stopping and self._hashed >= self._target:
                self._cond.wait()
            self._idle = False
            return not self._stopping

    def _run(self) -> None:
        # Signals must go to the main thread: only there can a handler abort a
        # blocked socket read (a cancel during a stall). Blocked here, the kernel
        # picks the main thread.
        signal.pthread_sigmask(signal.SIG_BLOCK, _SIGNALS)
        block = memoryview(bytearray(HASH_BLOCK))
        try:
            while True:
                if self._hashed >= self._target and not self._wait_for_work():
                    return
                if self._stopping:
                    return
                offset = self._hashed
                want = min(HASH_BLOCK, self._target - offset)
                n = os.preadv(self._fd, [block[:want]], offset)
                if n <= 0:
                    raise OSError(errno.EIO, f"partial file shorter than the {offset + want} bytes written")
                self._sha.update(block[:n])  # releases the GIL: overlaps the main thread's reads
                self._hashed = offset + n
        except BaseException as exc:  # reported to the main thread by result()
            with self._cond:
                self._error = exc
                self._cond.notify_all()


def _sync_file_range() -> Callable[[int, int, int], Any] | None:
    """``sync_file_range(fd, offset, n, SYNC_FILE_RANGE_WRITE)`` from libc, or None where unavailable."""
    try:
        import ctypes

        fn = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (ImportError, OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    fn.restype = ctypes.c_int
    write_only = 2  # SYNC_FILE_RANGE_WRITE: start writeback, do not wait
    return lambda fd, offset, n: fn(fd, offset, n, write_only)  # a failure only means a longer final fsync
