"""Whether a model's memory need is known, and recording it once it is read (``model_measured``).

The header is read by the supervisor (an effect: file I/O) before the first
placement of each file; placement then takes the need from the fold, so
every later decision is a function of the log. Pure module: stdlib only.
"""

from __future__ import annotations

from dataclasses import dataclass

import service.core.events as ev
from service.core.decision import Append, Decision, nothing
from service.core.errors import CommandRejected
from service.core.state import RouterState


@dataclass(frozen=True, slots=True)
class ToMeasure:
    """A model whose files are here but whose shape the log lacks (or has for other files)."""

    model: str
    path: str
    weights_bytes: int


def to_measure(state: RouterState, name: str) -> ToMeasure | None:
    """What to read for ``name`` before placing it, or None (unknown, no files, or measured)."""
    try:
        model = state.resolve(name)
    except CommandRejected:
        return None  # the decision itself refuses an ambiguous name
    if model is None or not model.available or not model.path:
        return None
    if model.shape is not None and model.shape.path == model.path:
        return None
    return ToMeasure(model.name, model.path, model.size)


def decide_measured(state: RouterState, measured: ev.ModelMeasured, model: str) -> Decision[None]:
    """Record ``measured`` unless the model's files changed meanwhile (or another pass recorded it)."""
    if to_measure(state, model) != ToMeasure(model, measured.path, measured.weights_bytes):
        return nothing(None)
    return Decision(None, (Append(measured, model),))
