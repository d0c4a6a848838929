"""The workers' event writer on PostgreSQL: psycopg 3 alone, no SQLAlchemy.

The same insert as every other writer (:func:`service.event_store.rows.insert_rows` with
the PostgreSQL statements: advisory lock, MAX + 1, NOTIFY), one transaction per append.
Importing this module (psycopg: its type adapters, ``asyncio``, ``logging``) costs a worker
start ~0.10 s on top of the worker's own imports, against ~0.16 s for SQLAlchemy alone
(best of 15 ``python -X importtime`` runs on the project's 2-core machine). Only this path
pays it: a worker given a SQLite file never imports psycopg, and this one never imports
SQLAlchemy (``tests/event_store/test_worker_writer.py``).

A connection that broke since the last append (a server restart) is replaced and the batch
sent once more: appends are idempotent by ``event_id``, so a batch whose COMMIT made it
before the break returns its original positions instead of being stored twice.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import Any

import psycopg

from service.core.events import Event, EventSource
from service.event_store.codec import NewEvent
from service.event_store.postgres.sql import PSYCOPG
from service.event_store.rows import LogDiskFull, StoreUnavailable, insert_rows
from service.event_store.unavailable import describe, is_unreachable
from service.event_store.urls import libpq_url, redacted

CONNECT_TIMEOUT_S = 10


class PostgresWorkerEventWriter:
    """Append-only access to a PostgreSQL log from a worker process."""

    def __init__(self, url: str, *, source: EventSource, connect: bool = True) -> None:
        self.url = url
        self.source: EventSource = {**source, "pid": source.get("pid", os.getpid())}
        self._lock = threading.Lock()  # a worker may emit from a helper thread
        self._conn: psycopg.Connection[Any] | None = None
        if connect:
            with self._lock:
                self._connect()  # here, in this process, and early: a wrong URL fails at start

    def _connect(self) -> psycopg.Connection[Any]:
        try:
            self._conn = psycopg.connect(
                libpq_url(self.url), connect_timeout=CONNECT_TIMEOUT_S, application_name="modelrouter-worker"
            )
        except psycopg.Error as exc:
            raise self._unavailable(exc) from exc
        return self._conn

    def _unavailable(self, exc: BaseException) -> StoreUnavailable:
        return StoreUnavailable(
            f"the event store at {redacted(self.url)} is unreachable ({describe(exc)}); nothing was acknowledged"
        )

    def append(self, batch: Sequence[NewEvent]) -> list[int]:
        """Append ``batch`` atomically; returns positions once committed. The server's disk
        full (53100) raises :class:`LogDiskFull`, rolled back: the next append may succeed."""
        with self._lock:
            try:
                return self._append_once(batch)
            except psycopg.Error as exc:
                LogDiskFull.raise_if(exc, redacted(self.url))
                if not is_unreachable(exc):
                    raise
                self._drop()
            try:  # on a new connection: idempotent by event_id
                return self._append_once(batch)
            except psycopg.Error as exc:
                self._drop()
                LogDiskFull.raise_if(exc, redacted(self.url))
                if is_unreachable(exc):
                    raise self._unavailable(exc) from exc
                raise

    def _append_once(self, batch: Sequence[NewEvent]) -> list[int]:
        conn = self._conn if self._conn is not None else self._connect()
        try:
            with conn.cursor() as cursor:
                positions = insert_rows(cursor, batch, self.source, None, PSYCOPG)
            conn.commit()
        except BaseException:
            if not conn.closed:
                conn.rollback()
            raise
        return positions

    def _drop(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def emit(self, event: Event, *, model: str | None = None) -> int:
        """Append one event (durable when this returns); returns its position."""
        return self.append([NewEvent(event, model)])[0]

    def close(self) -> None:
        with self._lock:
            self._drop()
