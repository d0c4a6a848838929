"""The thin HTTP API: handlers decide nothing, they call the core and append."""

from __future__ import annotations

from service.api.app import create_app

__all__ = ["create_app"]
