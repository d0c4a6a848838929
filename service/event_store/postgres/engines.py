"""SQLAlchemy engines for a PostgreSQL log: asyncpg for the service, psycopg for tools.

``pool_pre_ping`` makes every checkout prove its connection first (one ``SELECT 1``-sized
round trip), so after a server restart the first append reconnects instead of failing on a
dead socket: an outage costs the appends made while the server is down, nothing after.
"""

from __future__ import annotations

from sqlalchemy import Engine, create_engine
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from service.event_store.urls import sqlalchemy_url

CONNECT_TIMEOUT_S = 10
"""How long a connection attempt may take before the append fails as unavailable."""


def sync_engine(url: str, *, write: bool = True) -> Engine:
    """Engine for CLI tools and tests (psycopg 3, sync). Each process opens its own."""
    return create_engine(
        sqlalchemy_url(url, "psycopg"),
        pool_pre_ping=True,
        pool_size=1 if write else 2,
        max_overflow=0 if write else 2,
        connect_args={"connect_timeout": CONNECT_TIMEOUT_S, "application_name": "modelrouter"},
    )


def async_engine(url: str, *, write: bool = True) -> AsyncEngine:
    """Engine for the service (asyncpg). One write engine, one read engine, as on SQLite."""
    return create_async_engine(
        sqlalchemy_url(url, "asyncpg"),
        pool_pre_ping=True,
        pool_size=1 if write else 4,
        max_overflow=0 if write else 4,
        connect_args={"timeout": CONNECT_TIMEOUT_S, "server_settings": {"application_name": "modelrouter"}},
    )
