"""Alembic migrations of the event store, installed as a package so that a wheel carries them.

The service builds its Alembic config in code from this package's location
(``service.migrate``); ``alembic.ini`` at the repo root is for
developers' ``alembic`` command line only.
"""
