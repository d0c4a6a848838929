"""Downloads on the service side: resolving model names to files (resolution), what is on disk
in the HF cache (cache_files) and removing a model's files (removal)."""

from __future__ import annotations

__all__: list[str] = []
