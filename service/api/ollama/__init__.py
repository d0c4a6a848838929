"""Ollama's API on the service's port (``/api/*``): another front on the same supervisors, log
and workers (docs/ollama-compat.md)."""

from __future__ import annotations

from service.api.ollama._routes import OLLAMA_HANDLERS, ollama_router

__all__ = ["OLLAMA_HANDLERS", "ollama_router"]
