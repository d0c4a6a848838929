"""A named key's model scope in the handlers (issue 34): a request naming a model outside the key's
``models`` globs is refused (403, in the API's shape), and listings show only the models it may use.

A model is matched by its canonical name and every alias (the presets' and those added at run time),
so a key scoped to ``team/*`` may use ``team/x`` by any of its names; a name the catalogue does not
know is matched as given (a pull of ``team/new`` by a key scoped to ``team/*``).
"""

from __future__ import annotations

from service.api.problems import Problem
from service.api.refusals import refusal_problem
from service.core.errors import CommandRejected
from service.core.keys import Principal, check_model, model_allowed
from service.core.state import ModelState, RouterState, evolve


def model_names(state: RouterState, name: str) -> tuple[str, ...]:
    """Every name of the model ``name`` finds (itself first), or just ``name`` for an unknown one."""
    try:
        found = state.resolve(name)
    except CommandRejected:  # an ambiguous short name: the handler answers the 409 itself
        found = None
    return (name,) if found is None else (name, found.name, *found.aliases)


def model_refusal(caller: Principal, state: RouterState, name: str, path: str) -> Problem | None:
    """The 403 to raise when ``caller`` may not use model ``name`` on ``path``; None when it may."""
    if caller.full:
        return None
    refusal = check_model(caller, model_names(state, name), name)
    return None if refusal is None else refusal_problem(refusal, path)


def require_model(caller: Principal, state: RouterState, name: str, path: str) -> None:
    """Raise the 403 of :func:`model_refusal` (handlers call this before touching the model)."""
    problem = model_refusal(caller, state, name, path)
    if problem is not None:
        raise problem


def visible(caller: Principal, model: ModelState) -> bool:
    """Whether a listing shows ``model`` to ``caller``."""
    return caller.scope is None or model_allowed(caller.scope, (model.name, *model.aliases))


def scoped_state(caller: Principal, state: RouterState) -> RouterState:
    """``state`` with only the models ``caller`` may use, for the listings rendered from a state."""
    if caller.scope is None:
        return state
    return evolve(state, models={name: m for name, m in state.models.items() if visible(caller, m)})
