"""llama-server's resumable streams (``tools/server/server-stream.cpp``), keyed by ``X-Conversation-Id``.

A streamed completion whose request carries ``X-Conversation-Id`` is tee'd into
that conversation's session: the SSE bytes the client is sent are also kept (the
last 4 MiB), and the generation no longer stops when the client hangs up; only
``DELETE /v1/stream?conv_id=`` (or a new stream of the same conversation)
cancels it. ``GET /v1/stream?conv_id=&from=OFFSET`` replays the bytes from a
byte offset and follows the stream until it ends; ``POST /v1/streams/lookup``
``{"conversation_ids": [...]}`` reports the sessions of the ids asked about
(and of ``id::…`` sub-conversations), never others. Finished sessions are kept
for 300 s.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs

from workers.inference.http._errors import ApiError
from workers.inference.http._json import JsonObject

TTL_S = 300.0
MAX_BYTES = 4 * 1024 * 1024
WAKE_S = 0.2


class Session:
    """One conversation's stream: a byte buffer that drops its front past ``MAX_BYTES``."""

    def __init__(self, conversation_id: str, clock: Callable[[], float]) -> None:
        self.conversation_id = conversation_id
        self.started_at = int(clock())
        self.completed_at = 0
        self._clock = clock
        self._buf = bytearray()
        self.dropped = 0  # bytes evicted from the front
        self.done = False
        self.cancelled = False
        self._cv = threading.Condition()

    def append(self, data: bytes) -> None:
        with self._cv:
            if self.done:
                return
            self._buf += data
            if len(self._buf) > MAX_BYTES:
                cut = len(self._buf) - MAX_BYTES
                del self._buf[:cut]
                self.dropped += cut
            self._cv.notify_all()

    def finish(self) -> None:
        with self._cv:
            if not self.done:
                self.done, self.completed_at = True, int(self._clock())
            self._cv.notify_all()

    def is_cancelled(self) -> bool:
        """The stream's ``client_gone``: with a session only a DELETE stops the generation."""
        return self.cancelled

    @property
    def total(self) -> int:
        with self._cv:
            return self.dropped + len(self._buf)

    def read_from(self, offset: int) -> bytes | None:
        """Bytes from ``offset`` on (waiting up to ``WAKE_S`` for some); None once it ended there."""
        with self._cv:
            if offset < self.dropped:
                raise ApiError(400, "Stream offset lost, please restart")
            if offset >= self.dropped + len(self._buf) and not self.done:
                self._cv.wait(WAKE_S)
            data = bytes(self._buf[offset - self.dropped :])
            return None if not data and self.done else data


class Sessions:
    """The worker's live sessions, one per conversation id."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._by_id: dict[str, Session] = {}

    def open(self, headers: Any) -> Session | None:
        """The session of the request's ``X-Conversation-Id`` (a new one, ending any previous), or None."""
        conv = (headers.get("X-Conversation-Id") or "").strip()
        if not conv:
            return None
        fresh = Session(conv, self._clock)
        with self._lock:
            self._expire()
            previous, self._by_id[conv] = self._by_id.get(conv), fresh
        if previous is not None:
            previous.cancelled = True
            previous.finish()
        return fresh

    def evict(self, session: Session, cancel: bool = False) -> None:
        with self._lock:
            if self._by_id.get(session.conversation_id) is session:
                del self._by_id[session.conversation_id]
        session.cancelled = session.cancelled or cancel
        session.finish()

    def _expire(self) -> None:
        cutoff = self._clock() - TTL_S
        for conv, s in list(self._by_id.items()):
            if s.completed_at and s.completed_at <= cutoff:
                del self._by_id[conv]

    def get(self, path: str) -> Session:
        """``GET /v1/stream``'s session (400 without ``conv_id``, 404 unknown or expired)."""
        conv = _conv_id(path)
        with self._lock:
            self._expire()
            session = self._by_id.get(conv)
        if session is None:
            raise ApiError(404, "Stream not found or expired", "not_found_error")
        return session

    def delete(self, path: str) -> None:
        conv = _conv_id(path)
        with self._lock:
            session = self._by_id.get(conv)
        if session is not None:
            self.evict(session, cancel=True)

    def lookup(self, body: JsonObject) -> list[JsonObject]:
        ids = body.get("conversation_ids")
        wanted = [i for i in ids if isinstance(i, str) and i] if isinstance(ids, list) else []
        with self._lock:
            self._expire()
            live = list(self._by_id.values())
        found = [
            s for rid in wanted for s in live if s.conversation_id == rid or s.conversation_id.startswith(rid + "::")
        ]
        return [
            {
                "conversation_id": s.conversation_id,
                "is_done": s.done,
                "total_bytes": s.total,
                "started_at": s.started_at,
                "completed_at": s.completed_at,
            }
            for s in found
        ]


def _conv_id(path: str) -> str:
    query = parse_qs(path.split("?", 1)[1] if "?" in path else "")
    conv = (query.get("conv_id") or [""])[0]
    if not conv:
        raise ApiError(400, "Missing conversation id in path")
    return conv


def replay_offset(path: str) -> int:
    query = parse_qs(path.split("?", 1)[1] if "?" in path else "")
    raw = (query.get("from") or ["0"])[0]
    if not raw.isdigit():
        raise ApiError(400, "Invalid 'from' offset")
    return int(raw)


def replay(session: Session, offset: int, write: Callable[[bytes], None], gone: Callable[[], bool]) -> None:
    """Write the session's bytes from ``offset`` until it ends (or the reader hangs up)."""
    if offset < session.dropped:
        raise ApiError(400, "Stream offset lost, please restart")
    while not gone():
        data = session.read_from(offset)
        if data is None:
            return
        if data:
            write(data)
            offset += len(data)
