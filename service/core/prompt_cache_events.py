"""A model's prompt cache on disk (issue 35): saved by its worker at a planned stop, restored by the
next worker of the model at load, discarded when it no longer matches or the budget wants the room.

Kept beside :mod:`service.core.events`, which re-exports them and lists them in its registry; the
catalogue is ``docs/event-catalogue.md``. Pure: stdlib only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

from service.core.event_base import JSON, Event


@dataclass(frozen=True, slots=True, kw_only=True)
class PromptCacheSaved(Event):
    """The worker ``instance_id`` wrote one prompt-cache entry (a sequence's KV state with its tokens,
    llama.cpp's ``llama_state_seq_save_file``) to ``file`` before a planned stop: written under a
    temporary name, fsynced, then renamed, so a file exists only once whole. ``prefix_sha256`` is the
    hash of its tokens, ``model_sha256`` the model file's, ``settings`` the context settings a restore
    must match (``n_ctx`` per sequence, cache types, ...)."""

    TYPE: ClassVar[str] = "prompt_cache_saved"
    instance_id: str
    file: str
    tokens: int
    bytes: int
    prefix_sha256: str
    model_sha256: str
    settings: Mapping[str, JSON] = field(default_factory=dict)  # free-form: llama.cpp's context settings, as written


@dataclass(frozen=True, slots=True, kw_only=True)
class PromptCacheRestored(Event):
    """The worker ``instance_id`` loaded ``file`` into its prompt cache (``lazy``: on the first request
    that needed it, not before ready): a request starting with those ``tokens`` skips their prefill."""

    TYPE: ClassVar[str] = "prompt_cache_restored"
    instance_id: str
    file: str
    tokens: int
    bytes: int
    lazy: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class PromptCacheDiscarded(Event):
    """``file`` was deleted unused: ``reason`` ``model_changed`` (its model's sha256 differs),
    ``settings_changed`` (the context settings differ), ``corrupt`` (it does not read back),
    ``budget`` (the disk budget wanted the room: the least recently used first), ``model_removed``.
    ``instance_id``: the worker that found it (None: the service)."""

    TYPE: ClassVar[str] = "prompt_cache_discarded"
    file: str
    reason: str
    instance_id: str | None = None
    bytes: int = 0
