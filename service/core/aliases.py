"""Names a model gains and loses at run time: Ollama's ``/api/copy``, and its ``/api/delete`` of a copy.

Ollama's copy writes a second manifest naming the same blobs, so one model answers to two
names; here that is one model with an added alias (``model_aliased``), resolved as a
preset's alias is (:meth:`RouterState.resolve`, after the presets' own). A name means one
model: giving it to a second one is refused (409) rather than silently taking it from the
first, which Ollama's overwrite of a manifest would do; copying a name onto a name of the same
model changes nothing, as Ollama's copy of a model onto itself. Deleting an added alias takes
back that name only (``model_alias_removed``); deleting the model (``model_removed``) takes its
added aliases with it.

Pure: stdlib only.
"""

from __future__ import annotations

import service.core.events as ev
from service.core.decision import Decision, about, nothing
from service.core.errors import CommandRejected
from service.core.state import ModelState, RouterState

__all__ = ["add_alias", "alias_owner", "remove_alias"]


def _listed(state: RouterState, name: str) -> ModelState:
    found = state.resolve(name)
    if found is None or not found.listed:
        raise CommandRejected("model_not_found", f"model {name!r} is not found", model=name)
    return found


def _holder(state: RouterState, name: str) -> ModelState | None:
    """The model ``name`` already means (its name, an alias, or a short ``user/repo``); several: a 409."""
    try:
        return state.resolve(name)
    except CommandRejected as ambiguous:
        raise CommandRejected("conflict", f"{name!r} already names several models", model=name) from ambiguous


def add_alias(state: RouterState, source: str, alias: str) -> Decision[str]:
    """Give the model ``source`` names the extra name ``alias``; answers the model's own name.
    Refused: ``source`` unknown (404), ``alias`` already a name of another model or of a model the
    log knows (409)."""
    model = _listed(state, source)
    holder = _holder(state, alias)
    if holder is not None and holder.name == model.name:
        return nothing(model.name)  # already one of its names
    if holder is not None:
        raise CommandRejected(
            "conflict", f"{alias!r} already names model {holder.name!r}: delete that name first", model=alias
        )
    return Decision(model.name, about(model.name, [ev.ModelAliased(alias=alias)]))


def alias_owner(state: RouterState, name: str) -> ModelState | None:
    """The model whose added alias ``name`` is (not its own name, not a preset's alias), or None."""
    if name in state.models:
        return None
    return next((m for m in state.models.values() if name in m.added_aliases), None)


def remove_alias(state: RouterState, alias: str) -> Decision[str]:
    """Take the added alias ``alias`` back from its model (the model and its other names stay);
    answers the model's name. Not an added alias: 404."""
    owner = alias_owner(state, alias)
    if owner is None:
        raise CommandRejected("model_not_found", f"model {alias!r} is not found", model=alias)
    return Decision(owner.name, about(owner.name, [ev.ModelAliasRemoved(alias=alias)]))
