"""A small disk for a test (:mod:`devtools.small_disk`), or the test skipped saying why it cannot mount one."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from devtools.small_disk import CannotMount, SmallDisk, small_disk


def mounted(size_bytes: int, owner: str | None = None) -> Iterator[SmallDisk]:
    """Yields the mounted disk once (``for disk in mounted(...)`` inside a fixture, which then yields
    within the loop), unmounting it when the fixture resumes; skips where mounting is refused."""
    try:
        with small_disk(size_bytes, owner=owner) as disk:
            yield disk
    except CannotMount as exc:
        pytest.skip(str(exc))
