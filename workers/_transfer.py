"""The byte mover: fetch one blob over HTTP into a resumable, verified partial file.

Why not ``hf_hub_download``: since huggingface_hub 1.18 every process writes a
process-unique ``.incomplete`` file and deletes it on failure, so nothing
survives a crash or a restart (peers.md D1). Here the partial has a fixed
name, is resumed with ``Range: bytes=<size>-`` after its bytes are re-hashed,
and is only ever deleted when its content is proven wrong.

Retries: connection errors, early EOF, 5xx/429/408 and stalls (no byte for
``stall_timeout``: the read timeout) are retried from the last byte written,
with capped exponential backoff (:func:`service.core.backoff.retry_delay`).
The failure counter resets whenever an attempt moved bytes, so a flaky but
progressing server never exhausts the budget; ``max_retries`` failures in a
row without progress give up with reason ``network``. 4xx are not retried.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from service.core.backoff import retry_delay
from service.core.progress import RateState, eta_seconds, should_emit, update_rate
from workers._interrupts import Interrupts

_DISK_FULL_ERRNOS = {errno.ENOSPC, errno.EFBIG, errno.EDQUOT}
_REHASH_CHUNK = 4 << 20


@dataclass(frozen=True, slots=True)
class TransferConfig:
    """Tunables; tests shrink ``stall_timeout`` and the backoff."""

    stall_timeout: float = 30.0
    connect_timeout: float = 15.0
    max_retries: int = 5
    retry_base: float = 1.0
    retry_cap: float = 30.0
    fsync: bool = True

    def timeout(self) -> httpx.Timeout:
        # The read timeout *is* the stall detector: no byte for this long.
        return httpx.Timeout(connect=self.connect_timeout, read=self.stall_timeout,
                             write=self.stall_timeout, pool=self.connect_timeout)  # fmt: skip


class TransferError(Exception):
    """A download that cannot complete; ``reason`` is a ``download_failed`` reason."""

    def __init__(self, reason: str, message: str, *, retryable: bool) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.retryable = retryable


class _Retry(Exception):
    """A transient failure of one attempt."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class ProgressMeter:
    """Job-wide byte counters and throttled ``download_progress`` emission.

    ``done`` counts bytes of the job on disk (so a resumed job starts above 0),
    ``transferred`` the bytes this process received; the rate uses the latter.
    """

    def __init__(self, total: int, done: int, emit: Callable[[dict[str, Any]], None],
                 clock: Callable[[], float] = time.monotonic) -> None:  # fmt: skip
        self.total, self.done, self.transferred = total, done, 0
        self._emit, self._clock = emit, clock
        self._last_time: float | None = None
        self._last_done: int | None = None
        self._rate = update_rate(RateState(), clock(), 0)

    def add(self, n: int) -> None:
        self.done += n
        self.transferred += n
        now = self._clock()
        if should_emit(self._last_time, self._last_done, now, self.done, self.total):
            self._send(now)

    def rewind(self, n: int) -> None:
        """The server ignored our Range and restarts at 0: ``n`` bytes on disk are dropped."""
        self.done -= n

    def finish(self) -> None:
        """Always send the final event (the throttle may have swallowed the tail)."""
        self._send(self._clock())

    def _send(self, now: float) -> None:
        self._rate = update_rate(self._rate, now, self.transferred)
        rate = self._rate.rate
        self._last_time, self._last_done = now, self.done
        self._emit({
            "bytes_done": self.done, "bytes_total": self.total,
            "bytes_per_second": round(rate, 1) if rate is not None else None,
            "eta_seconds": _round(eta_seconds(self.done, self.total, rate)),
        })  # fmt: skip


@dataclass(slots=True)
class _Partial:
    fd: int
    hasher: Any
    have: int


def fetch_blob(client: httpx.Client, url: str, headers: dict[str, str], partial_path: str, size: int,
               sha256: str, cfg: TransferConfig, meter: ProgressMeter, interrupts: Interrupts,
               counted: int, log: Callable[..., None] = lambda *a, **k: None) -> None:  # fmt: skip
    """Download ``url`` into ``partial_path`` until it holds ``size`` bytes hashing to ``sha256``.

    ``counted`` is how many bytes of this partial the meter already counts
    (its size when the job started). On success the partial is complete,
    verified and fsynced; the caller publishes it. Raises
    :class:`TransferError` or :class:`workers._interrupts.Interrupted`.
    """
    fd = os.open(partial_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        part = _rehash(fd, size, interrupts)
        meter.rewind(counted - part.have)  # normally 0; >0 if an oversized partial was reset
        failures = 0
        while part.have < size:
            before = part.have
            try:
                _attempt(client, url, headers, part, size, cfg, meter, interrupts)
            except _Retry as exc:
                failures = 1 if part.have > before else failures + 1
                if failures > cfg.max_retries:
                    raise TransferError("network", f"{exc}; gave up after {failures} attempts without progress",
                                        retryable=True) from exc  # fmt: skip
                delay = retry_delay(failures, cfg.retry_base, cfg.retry_cap, random.random())
                if exc.retry_after is not None:
                    delay = max(delay, min(exc.retry_after, cfg.retry_cap))
                log("download_retry", error=str(exc), attempt=failures, delay=round(delay, 3), offset=part.have)
                with interrupts.blocking():
                    time.sleep(delay)
        if part.hasher.hexdigest() != sha256:
            os.unlink(partial_path)
            raise TransferError("checksum_mismatch", f"sha256 of {url} is {part.hasher.hexdigest()}, "
                                f"expected {sha256}; partial deleted", retryable=True)  # fmt: skip
        if cfg.fsync:
            os.fsync(fd)
    finally:
        os.close(fd)


def _rehash(fd: int, size: int, interrupts: Interrupts) -> _Partial:
    """Hash the bytes already in the partial so the download can continue the digest."""
    have = os.fstat(fd).st_size
    hasher = hashlib.sha256()
    if have > size:
        os.ftruncate(fd, 0)  # longer than the file can be: not ours to trust
        return _Partial(fd, hasher, 0)
    offset = 0
    while offset < have:
        interrupts.check()
        block = os.pread(fd, min(_REHASH_CHUNK, have - offset), offset)
        if not block:
            break
        hasher.update(block)
        offset += len(block)
    return _Partial(fd, hasher, offset)


def _attempt(client: httpx.Client, url: str, headers: dict[str, str], part: _Partial, size: int,
             cfg: TransferConfig, meter: ProgressMeter, interrupts: Interrupts) -> None:  # fmt: skip
    req_headers = dict(headers)
    if part.have > 0:
        req_headers["Range"] = f"bytes={part.have}-"
    try:
        with interrupts.blocking():
            resp = client.send(client.build_request("GET", url, headers=req_headers), stream=True)
    except httpx.TimeoutException as exc:
        raise _Retry(f"timeout connecting to {url}: {type(exc).__name__}") from exc
    except httpx.TransportError as exc:
        raise _Retry(f"cannot connect to {url}: {type(exc).__name__}: {exc}") from exc
    try:
        _check_response(resp, part, size, meter)
        # No chunk_size: httpx would buffer up to it before yielding, so bytes
        # received before a stall or a kill would never reach the partial file.
        chunks = resp.iter_raw()
        while part.have < size:
            try:
                with interrupts.blocking():
                    chunk = next(chunks, None)
            except httpx.TimeoutException as exc:
                raise _Retry(f"stalled: no data for {cfg.stall_timeout}s at byte {part.have}") from exc
            except httpx.TransportError as exc:
                raise _Retry(f"connection lost at byte {part.have}: {type(exc).__name__}: {exc}") from exc
            if chunk is None:
                raise _Retry(f"connection closed early at byte {part.have} of {size}")
            if part.have + len(chunk) > size:
                raise TransferError("checksum_mismatch", f"server sent more than {size} bytes", retryable=True)
            _write(part, chunk, meter)
            interrupts.check()
    finally:
        with contextlib.suppress(Exception):  # a broken connection may fail to close; irrelevant here
            resp.close()


def _check_response(resp: httpx.Response, part: _Partial, size: int, meter: ProgressMeter) -> None:
    status = resp.status_code
    if status == 206:
        start, total = _content_range(resp.headers.get("Content-Range"))
        if start != part.have or total not in (None, size):
            raise _Retry(f"bad Content-Range {resp.headers.get('Content-Range')!r} for offset {part.have}")
        return
    if status == 200:
        length = resp.headers.get("Content-Length")
        if length is not None and length.isdigit() and int(length) != size:
            raise TransferError("checksum_mismatch", f"server size {length} != expected {size}", retryable=False)
        if part.have:
            # Our Range was ignored: the body starts at byte 0, so start over.
            os.ftruncate(part.fd, 0)
            meter.rewind(part.have)
            part.hasher, part.have = hashlib.sha256(), 0
        return
    if status == 416 and part.have:
        os.ftruncate(part.fd, 0)  # our partial does not fit the remote file: restart
        meter.rewind(part.have)
        part.hasher, part.have = hashlib.sha256(), 0
        raise _Retry("416 Range Not Satisfiable; restarting from byte 0")
    if status in (408, 429) or status >= 500:
        raise _Retry(f"HTTP {status} from {resp.url}", _retry_after(resp.headers.get("Retry-After")))
    raise _status_error(resp)


def _write(part: _Partial, chunk: bytes, meter: ProgressMeter) -> None:
    view = memoryview(chunk)
    while view:
        try:
            n = os.pwrite(part.fd, view, part.have)
        except OSError as exc:
            if exc.errno in _DISK_FULL_ERRNOS:
                raise TransferError("disk_full", f"cannot write: {os.strerror(exc.errno)} after {part.have} bytes; "
                                    "partial kept for resume", retryable=False) from exc  # fmt: skip
            raise
        part.hasher.update(view[:n])
        part.have += n
        meter.add(n)
        view = view[n:]


def _status_error(resp: httpx.Response) -> TransferError:
    """Map a non-retryable HTTP answer, using the Hub's X-Error-Code when present."""
    status, code = resp.status_code, resp.headers.get("X-Error-Code")
    detail = resp.headers.get("X-Error-Message") or resp.reason_phrase
    if code == "GatedRepo" or (code is None and status in (401, 403)):
        return TransferError("unauthorized", f"HTTP {status} {code or ''}: {detail} (check HF_TOKEN)".strip(),
                             retryable=False)  # fmt: skip
    if code in ("RepoNotFound", "RevisionNotFound", "EntryNotFound") or status in (404, 410):
        return TransferError("not_found", f"HTTP {status} {code or ''}: {detail}", retryable=False)
    return TransferError("internal", f"unexpected HTTP {status} from {resp.url}: {detail}", retryable=False)


def _content_range(value: str | None) -> tuple[int | None, int | None]:
    # "bytes 100-199/200" -> (100, 200); "/*" -> total None
    try:
        _, _, rest = (value or "").partition(" ")
        span, _, total = rest.partition("/")
        return int(span.split("-", 1)[0]), (None if total == "*" else int(total))
    except ValueError:
        return None, None


def _retry_after(value: str | None) -> float | None:
    try:
        return max(0.0, float(value)) if value else None
    except ValueError:
        return None  # an HTTP date: ignore, our own backoff applies


def _round(x: float | None) -> float | None:
    return round(x, 2) if x is not None else None
