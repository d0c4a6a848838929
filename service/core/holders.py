"""Who holds a model's files: a node, or any node that is up. Used by placement and by the lookup of
a model's draft (:mod:`service.core.draft_source`), which placement needs in turn.

Pure module: the fold's state in.
"""

from __future__ import annotations

from service.core.state import ModelState, RouterState


def holds(model: ModelState, node: str | None) -> bool:
    """Whether ``node`` has ``model``'s files (without nodes: whether the model has any)."""
    if node is None or not model.holders:
        return model.available and bool(model.path)
    return node in model.holders


def held_live(state: RouterState, model: ModelState) -> bool:
    """Whether ``model``'s files are on a node that is up (without nodes: whether it has any). A
    model that only lost or departed nodes hold is downloaded again to run; a holder not joined yet
    (a node's catalogue is recorded before its ``node_joined``) counts as up."""
    if not model.holders:
        return model.available
    return any((node := state.nodes.get(name)) is None or not node.gone for name in model.holders)
