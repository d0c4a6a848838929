"""Which events a replay may leave out, and how to fold the ones that stand for them.

Three event types only overwrite fields of one subject and never change a status:
``download_progress`` (its job's bytes, rate and ETA), ``loading_progress`` (its instance's
progress) and ``instance_stats`` (its instance's engine summary). Of several events of one such
type about one subject, with no other event of their model between them, folding only the last
gives the state that folding all of them gives. Rates and ETAs are of the moment, so nothing
in the state adds them up. Two details make "only the last" exact:

* a ``download_progress`` whose ``bytes_total`` is 0 keeps the total the job had (the fold's
  ``e.bytes_total or job.bytes_total``), so the last one that has a total is kept as well;
* an event the fold refuses (an impossible transition) is counted in ``anomalies``. Every event
  of such a run finds its subject in the same status (only the model's other events change
  it), so the kept event is refused too, and :func:`fold_superseding` counts the ones it stands
  for.

Events of other models never change this model. Events of other superseding types of the same
model don't either: they write fields of their own subject and read none of these. The
differential tests (``tests/core/test_superseding.py``, ``tests/recovery/test_fast_decode.py``)
fold random logs both ways, so a future handler that breaks either rule fails there.

A left-out event is not decoded into its class; ``GET /events``, the tail and ``modelrouter
verify`` still read every one.

Pure module: stdlib only.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass

import service.core.events as ev
from service.core.fold import fold
from service.core.state import RouterState, evolve

__all__ = ["SUPERSEDING", "Entry", "Superseding", "fold_superseding", "plan"]


@dataclass(frozen=True, slots=True)
class Superseding:
    """How one event type supersedes its earlier events."""

    subject: str
    """The field naming what the event is about: a run is per model, type and this field's value."""
    zero_keeps: str | None = None
    """A field whose zero value leaves the previous value in the state (so a later event with a
    zero there does not supersede an earlier one with a value)."""


SUPERSEDING: Mapping[str, Superseding] = {
    ev.DownloadProgress.TYPE: Superseding("job_id", zero_keeps="bytes_total"),
    ev.LoadingProgress.TYPE: Superseding("instance_id"),
    ev.InstanceStats.TYPE: Superseding("instance_id"),
}
"""Event type -> its rule. Only current-version payloads of these types take part."""

Entry = tuple[str | None, Hashable, bool]
"""What :func:`plan` needs of one event, in log order: ``(model, run, complete)``. ``run`` is the
event's type and subject (any hashable, equal for events of one run), or None for an event that
cannot be left out (every other type, an old version, a subject that is not a string): such an
event of a model ends every run of that model. ``complete`` is False when the event's
``zero_keeps`` field is 0."""


def plan(entries: Sequence[Entry], counts: Sequence[int] | None = None) -> list[int]:
    """For each entry: -1 when the replay may leave the event out, else how many left-out
    events the event stands for (fold it with :func:`fold_superseding`).

    One pass from the end: per model, the runs still open since that model's last event that
    ends them. An event is left out when a later event of its run is kept and either that one
    or a kept one after it is complete, or the event itself is not.

    ``counts`` (one per entry, default all 1) lets an entry stand for that many consecutive,
    identical entries of a run (it is the last of them): those fold as their last one does, so
    a reader that groups them gets, per group, what the last entry of the group gets here, with
    the group's others counted in. An entry with no run must have a count of 1."""
    weights = [0] * len(entries) if counts is None else [count - 1 for count in counts]
    open_runs: dict[str | None, dict[Hashable, tuple[int, bool]]] = {}
    for index in range(len(entries) - 1, -1, -1):
        model, run, complete = entries[index]
        if run is None:
            open_runs.pop(model, None)
            continue
        runs = open_runs.get(model)
        if runs is None:
            runs = open_runs[model] = {}
        later = runs.get(run)
        if later is None:
            runs[run] = (index, complete)
        elif later[1] or not complete:
            weights[later[0]] += weights[index] + 1
            weights[index] = -1
        else:  # the later ones all lack the total this one has: it stays
            runs[run] = (index, True)
    return weights


def fold_superseding(state: RouterState, recorded: ev.Recorded, stands_for: int) -> RouterState:
    """``fold(state, recorded)``, where ``recorded`` stands for ``stands_for`` earlier events of
    its run that :func:`plan` left out: refused, it counts as refused ``1 + stands_for`` times."""
    new = fold(state, recorded)
    if stands_for and new.anomalies > state.anomalies:
        return evolve(new, anomalies=new.anomalies + stands_for)
    return new
