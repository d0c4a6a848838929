"""The pure core: events, the fold and decisions. Standard library only; no I/O, no clock."""

from __future__ import annotations

__all__: list[str] = []
