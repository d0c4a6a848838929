"""modelrouter: an event-sourced local-LLM model manager (the service package)."""

from __future__ import annotations

__all__ = ["__version__"]

__version__ = "0.1.0"
