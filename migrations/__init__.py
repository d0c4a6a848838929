"""Alembic migrations of the event store, installed as a package so that a wheel carries them.

The service builds its Alembic config in code from this package's location
(``service.recovery.migrate``); ``alembic.ini`` at the repo root is for
developers' ``alembic`` command line only.
"""

HEAD = "a1f0c0de0002"
"""The newest revision: a log stamped with it needs no migration, which the service sees
without loading Alembic (``service.recovery.migrate``). ``tests/test_migrations.py`` holds it to
Alembic's own head, so a new migration must move it."""
