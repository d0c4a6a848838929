"""The PostgreSQL backend of the event store: the same contract as SQLite's, over a server.

``sql`` (the append's statements and the ordering argument), ``engines`` (SQLAlchemy +
asyncpg for the service, + psycopg for tools), ``tail`` (LISTEN/NOTIFY wake-ups),
``worker_writer`` (psycopg alone, for workers). Nothing here is imported on the SQLite path.
"""

from __future__ import annotations

__all__: list[str] = []
