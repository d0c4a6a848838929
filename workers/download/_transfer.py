"""The byte mover: fetch one blob over HTTP into a resumable, verified partial file.

Why not ``hf_hub_download``: since huggingface_hub 1.18 every process writes a
process-unique ``.incomplete`` file and deletes it on failure, so nothing
survives a crash or a restart (peers.md D1). Here the partial has a fixed
name, is resumed with ``Range: bytes=<size>-`` (the bytes already there are
re-hashed by :mod:`workers.download._partial_file` while new ones arrive), and is only ever
deleted when its content is proven wrong.

Speed (``bench/download.py``): the body is received straight into one
256 KiB buffer (:mod:`workers.download._http_client`, one ``recv_into`` per call), sha256 runs
in a second thread and writeback starts during the transfer
(:mod:`workers.download._partial_file`), so on two cores hashing and fsync add little to
what a plain ``GET`` to a file costs. Why 256 KiB and not more: received bytes
must still be in the CPU cache when they are written; with 4 MiB buffers the
same download took ~2x the CPU. Bytes are written as soon as the socket has no
more waiting, at 256 KiB, or 0.1 s after the last write, and before any retry
or cancel, so bytes that arrived are on disk before a stall is declared.

Retries: connection errors, early EOF, 5xx/429/408 and stalls (no byte for
``stall_timeout``: the read timeout) are retried from the last byte written,
with capped exponential backoff (:func:`service.core.backoff.retry_delay`).
The failure counter resets whenever an attempt moved bytes, so a flaky but
progressing server never exhausts the budget; ``max_retries`` failures in a
row without progress give up with reason ``network``. 4xx are not retried.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypedDict

from service.core.backoff import retry_delay
from service.core.progress import RateState, eta_seconds, should_emit, update_rate
from workers.download._http_client import HttpError, HttpTimeout, HttpUnsupported, Response, Timeouts
from workers.download._http_client import get as http_get
from workers.download._interrupts import Interrupted, Interrupts
from workers.download._partial_file import DiskFull, PartialFile

READ_BUFFER = 256 << 10  # one receive asks for up to this much (module docstring: why not more)
FLUSH_BYTES = 256 << 10  # write a batch once this much is pending...
FLUSH_SECONDS = 0.1  # ...or this long after the previous write (slow links, TLS's 16 KiB records)


@dataclass(frozen=True, slots=True)
class TransferConfig:
    """Tunables; tests shrink ``stall_timeout`` and the backoff."""

    stall_timeout: float = 30.0
    connect_timeout: float = 15.0
    max_retries: int = 5
    retry_base: float = 1.0
    retry_cap: float = 30.0
    fsync: bool = True

    def timeouts(self) -> Timeouts:
        # The read timeout *is* the stall detector: no byte for this long.
        return Timeouts(connect=self.connect_timeout, read=self.stall_timeout)


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


class Progress(TypedDict):
    """The members of ``download_progress`` a meter measures (the job's id is the caller's)."""

    bytes_done: int
    bytes_total: int
    bytes_per_second: float | None
    eta_seconds: float | None


class ProgressMeter:
    """Job-wide byte counters and throttled ``download_progress`` emission.

    ``done`` counts bytes of the job on disk (so a resumed job starts above 0),
    ``transferred`` the bytes this process received; the rate uses the latter.
    """

    def __init__(
        self, total: int, done: int, emit: Callable[[Progress], None], clock: Callable[[], float] = time.monotonic
    ) -> None:
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
        self._emit(
            {
                "bytes_done": self.done,
                "bytes_total": self.total,
                "bytes_per_second": round(rate, 1) if rate is not None else None,
                "eta_seconds": _round(eta_seconds(self.done, self.total, rate)),
            }
        )


def fetch_blob(
    url: str,
    headers: dict[str, str],
    partial_path: str,
    size: int,
    sha256: str,
    cfg: TransferConfig,
    meter: ProgressMeter,
    interrupts: Interrupts,
    counted: int,
    log: Callable[..., None] = lambda *a, **k: None,
) -> None:
    """Download ``url`` into ``partial_path`` until it holds ``size`` bytes hashing to ``sha256``.

    ``counted`` is how many bytes of this partial the meter already counts
    (its size when the job started). On success the partial is complete,
    verified and (with ``cfg.fsync``) fsynced; the caller publishes it. Raises
    :class:`TransferError` or :class:`workers.download._interrupts.Interrupted`.
    """
    part = PartialFile(partial_path, size, fsync=cfg.fsync)
    try:
        meter.rewind(counted - part.have)  # normally 0; >0 if an oversized partial was reset
        buf = memoryview(bytearray(max(1, min(READ_BUFFER, size - part.have))))
        failures = 0
        while part.have < size:
            before = part.have
            try:
                _attempt(url, headers, part, size, cfg, meter, interrupts, buf)
            except _Retry as exc:
                failures = 1 if part.have > before else failures + 1
                if failures > cfg.max_retries:
                    raise TransferError(
                        "network", f"{exc}; gave up after {failures} attempts without progress", retryable=True
                    ) from exc
                delay = retry_delay(failures, cfg.retry_base, cfg.retry_cap, random.random())
                if exc.retry_after is not None:
                    delay = max(delay, min(exc.retry_after, cfg.retry_cap))
                log("download_retry", error=str(exc), attempt=failures, delay=round(delay, 3), offset=part.have)
                with interrupts.blocking():
                    time.sleep(delay)
        digest = part.digest(interrupts)
        if digest != sha256:
            os.unlink(partial_path)
            raise TransferError(
                "checksum_mismatch", f"sha256 of {url} is {digest}, expected {sha256}; partial deleted", retryable=True
            )
        if cfg.fsync:
            part.sync()
    finally:
        part.close()


def _attempt(
    url: str,
    headers: dict[str, str],
    part: PartialFile,
    size: int,
    cfg: TransferConfig,
    meter: ProgressMeter,
    interrupts: Interrupts,
    buf: memoryview,
) -> None:
    req_headers = dict(headers)
    if part.have > 0:
        req_headers["Range"] = f"bytes={part.have}-"
    try:
        with interrupts.blocking():
            resp = http_get(url, req_headers, cfg.timeouts())
    except HttpTimeout as exc:
        raise _Retry(f"timeout connecting to {url}: {exc}") from exc
    except HttpError as exc:
        raise _Retry(f"cannot connect to {url}: {exc}") from exc
    except HttpUnsupported as exc:
        raise TransferError("internal", f"{url}: {exc}", retryable=False) from exc
    try:
        _check_response(resp, part, size, meter)
        _receive(resp, part, size, cfg, meter, interrupts, buf)
    finally:
        resp.close()


def _receive(
    resp: Response,
    part: PartialFile,
    size: int,
    cfg: TransferConfig,
    meter: ProgressMeter,
    interrupts: Interrupts,
    buf: memoryview,
) -> None:
    """Receive the body into ``buf`` and append it to the partial in batches.

    ``buf[done:pos]`` is received but not yet written. Batching turns many
    small receives (TLS delivers 16 KiB records) into few writes; a batch is
    written as soon as no more bytes are waiting on the socket, when it
    reaches :data:`FLUSH_BYTES`, or :data:`FLUSH_SECONDS` after the last write.
    """
    done = pos = 0
    last_write = time.monotonic()
    try:
        while part.have + pos - done < size:
            if pos > done and not resp.data_ready():
                # About to wait for the network: write first, so a stall or a
                # kill finds every byte that arrived already in the partial.
                _write(part, buf[done:pos], meter)
                done, last_write = pos, time.monotonic()
                interrupts.check()
            if pos == len(buf):
                done = pos = 0  # everything in buf was written: a full buffer always flushes
            try:
                with interrupts.blocking():
                    n = resp.readinto(buf[pos:])
            except HttpTimeout as exc:
                raise _Retry(f"stalled: no data for {cfg.stall_timeout}s at byte {part.have + pos - done}") from exc
            except HttpError as exc:
                raise _Retry(f"connection lost at byte {part.have + pos - done}: {exc}") from exc
            if n == 0:
                raise _Retry(f"connection closed early at byte {part.have + pos - done} of {size}")
            if part.have + pos - done + n > size:
                raise TransferError("checksum_mismatch", f"server sent more than {size} bytes", retryable=True)
            pos += n
            now = time.monotonic()
            if pos == len(buf) or pos - done >= FLUSH_BYTES or now - last_write >= FLUSH_SECONDS:
                _write(part, buf[done:pos], meter)
                done, last_write = pos, now
                interrupts.check()
    except (_Retry, Interrupted):
        # Bytes that arrived before the stall, drop or cancel are good: keep them.
        _write(part, buf[done:pos], meter)
        raise
    _write(part, buf[done:pos], meter)


def _check_response(resp: Response, part: PartialFile, size: int, meter: ProgressMeter) -> None:
    status = resp.status
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
            meter.rewind(part.have)
            part.restart()
        return
    if status == 416 and part.have:
        meter.rewind(part.have)
        part.restart()  # our partial does not fit the remote file: restart
        raise _Retry("416 Range Not Satisfiable; restarting from byte 0")
    if status in (408, 429) or status >= 500:
        raise _Retry(f"HTTP {status} from {resp.url}", _retry_after(resp.headers.get("Retry-After")))
    raise _status_error(resp)


def _write(part: PartialFile, view: memoryview, meter: ProgressMeter) -> None:
    if not view:
        return
    before = part.have
    try:
        part.write(view)
    except DiskFull as exc:
        meter.add(part.have - before)
        raise TransferError("disk_full", f"{exc}; partial kept for resume", retryable=False) from exc
    meter.add(part.have - before)


def _status_error(resp: Response) -> TransferError:
    """Map a non-retryable HTTP answer, using the Hub's X-Error-Code when present."""
    status, code = resp.status, resp.headers.get("X-Error-Code")
    detail = resp.headers.get("X-Error-Message") or resp.reason
    if code == "GatedRepo" or (code is None and status in (401, 403)):
        return TransferError(
            "unauthorized", f"HTTP {status} {code or ''}: {detail} (check HF_TOKEN)".strip(), retryable=False
        )
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
