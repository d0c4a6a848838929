"""The fold's handlers of a model's prompt cache on disk (issue 35; see :mod:`service.core.fold`).

A save adds its file (a second save of the same name replaces it), a restore touches it and counts
its tokens, a discard drops it; ``model_removed`` drops them all (in :mod:`service.core.fold_catalogue`).
Events of a model the log does not know are ignored, as everywhere in the fold.
"""

from __future__ import annotations

import service.core.events as ev
from service.core.fold_support import model_of, on, put_model
from service.core.prompt_cache_state import PromptCacheFile
from service.core.state import RouterState


@on(ev.PromptCacheSaved)
def _saved(state: RouterState, rec: ev.Recorded) -> RouterState:
    e = rec.event
    assert isinstance(e, ev.PromptCacheSaved)
    model = model_of(state, rec)
    if model is None:
        return state
    entry = PromptCacheFile(
        file=e.file, tokens=e.tokens, bytes=e.bytes, saved_at=rec.recorded_at, instance_id=e.instance_id
    )
    return put_model(state, model.replace(prompt_cache={**model.prompt_cache, e.file: entry}))


@on(ev.PromptCacheRestored)
def _restored(state: RouterState, rec: ev.Recorded) -> RouterState:
    e = rec.event
    assert isinstance(e, ev.PromptCacheRestored)
    model = model_of(state, rec)
    if model is None:
        return state
    counted = model.prompt_cache_restored_tokens + max(e.tokens, 0)
    entry = model.prompt_cache.get(e.file)
    if entry is None:  # restored, yet never recorded as saved (an older log): counted all the same
        return put_model(state, model.replace(prompt_cache_restored_tokens=counted))
    touched = PromptCacheFile(
        file=entry.file,
        tokens=entry.tokens,
        bytes=entry.bytes,
        saved_at=entry.saved_at,
        restored_at=rec.recorded_at,
        instance_id=entry.instance_id,
    )
    return put_model(
        state,
        model.replace(prompt_cache={**model.prompt_cache, e.file: touched}, prompt_cache_restored_tokens=counted),
    )


@on(ev.PromptCacheDiscarded)
def _discarded(state: RouterState, rec: ev.Recorded) -> RouterState:
    e = rec.event
    assert isinstance(e, ev.PromptCacheDiscarded)
    model = model_of(state, rec)
    if model is None or e.file not in model.prompt_cache:
        return state
    kept = {name: entry for name, entry in model.prompt_cache.items() if name != e.file}
    return put_model(state, model.replace(prompt_cache=kept))
