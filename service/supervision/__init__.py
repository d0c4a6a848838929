"""Worker processes seen from the service: spawning and watching children, and the download and instance supervisors."""

from __future__ import annotations

__all__: list[str] = []
