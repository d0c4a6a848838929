"""A model's names added and taken back at run time (Ollama's ``/api/copy`` and ``/api/delete``).

Kept beside :mod:`service.core.events`, which re-exports them and lists them in
its registry; the catalogue is ``docs/event-catalogue.md``. The model is the
event's envelope (``model``); the payload is the other name. Pure: stdlib only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from service.core.event_base import Event


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelAliased(Event):
    """``alias`` names the model from now on, beside its own name and its presets' aliases (Ollama's
    copy: one model, two names). A fact of the log, so a restart or a reload of the sources keeps it."""

    TYPE: ClassVar[str] = "model_aliased"
    alias: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelAliasRemoved(Event):
    """``alias`` no longer names the model (Ollama's delete of a copy removes that name only)."""

    TYPE: ClassVar[str] = "model_alias_removed"
    alias: str
