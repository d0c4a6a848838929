"""What a drafted row costs the other slots (modelrouter's, beyond llama-server). Pure: no clock.

Every slot's token of a step waits for the whole ``llama_decode``. A slot that drafts ``k`` tokens adds
``k`` rows to the step, and a step of ``r`` output rows costs about ``fixed + per_row * r``: one pass
over the weights, then the rows' own compute (for Gemma 3 270M on two CPU cores, ~12 ms and ~3.5 ms, the
262k-entry output layer most of it; on a GPU the rows are nearly free). A slot that drafts 48 accepted
tokens gains a lot; the three beside it that had nothing to draft wait ~200 ms for each of their tokens
instead of ~26 ms, and their requests end later. llama-server lets that happen.

Here, while some generating slot has no draft this step, the drafts of the others share a budget of
rows that keeps the step within :data:`OTHERS_SLOWDOWN` of a plain step's cost:
``budget = OTHERS_SLOWDOWN * (fixed / per_row + generating)``. ``fixed / per_row`` (the fixed cost in
rows) is fitted online from the worker's own decodes (:class:`StepCost`), so the rule holds on any
machine: generous where rows are cheap, strict where each row is a pass of real compute. When every
generating slot drafts, each gains from the longer step and no budget applies.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

OTHERS_SLOWDOWN = 0.25
"""How much longer than a plain step a step may take for the drafts of some, while others draft nothing."""
DECAY = 0.98
"""Each decode's weight in the fit falls by this per later decode (~50 decodes remembered)."""
MIN_SPREAD = 2.0
"""The fit's row counts must vary by this much (their weighted standard deviation) before it is used."""


@dataclass
class StepCost:
    """A least-squares fit, recent decodes weighing most, of a decode's seconds against its output rows."""

    n: float = 0.0  # the weights' sum, then the weighted sums of rows, rows², seconds, rows·seconds
    rows: float = 0.0
    rows2: float = 0.0
    secs: float = 0.0
    rows_secs: float = 0.0

    def observe(self, rows: int, seconds: float) -> None:
        """One decode of ``rows`` output rows (and no prompt) that took ``seconds``."""
        self.n = self.n * DECAY + 1.0
        self.rows = self.rows * DECAY + rows
        self.rows2 = self.rows2 * DECAY + rows * rows
        self.secs = self.secs * DECAY + seconds
        self.rows_secs = self.rows_secs * DECAY + rows * seconds

    def fixed_rows(self) -> float | None:
        """A step's fixed cost counted in rows (``fixed / per_row``); None until the rows have varied
        enough to tell the two apart, or when rows look free (a GPU far from its limit)."""
        if self.n <= 0:
            return None
        mean_rows, mean_secs = self.rows / self.n, self.secs / self.n
        variance = self.rows2 / self.n - mean_rows * mean_rows
        if variance < MIN_SPREAD * MIN_SPREAD:
            return None
        per_row = (self.rows_secs / self.n - mean_rows * mean_secs) / variance
        fixed = mean_secs - per_row * mean_rows
        if per_row <= 0:
            return None
        return max(fixed, 0.0) / per_row


def share_drafts(drafts: Sequence[list[int]], fixed_rows: float | None) -> list[list[int]]:
    """The drafts of one step's generating slots (in their order), cut to the budget of rows while some
    slot has none (see the module docstring); unchanged when every slot drafts, or while the cost of a
    row is not known yet."""
    drafting = sum(1 for d in drafts if d)
    if fixed_rows is None or drafting in (0, len(drafts)):
        return list(drafts)
    budget = int(OTHERS_SLOWDOWN * (fixed_rows + len(drafts)))
    share, extra = divmod(budget, drafting)
    cut: list[list[int]] = []
    for d in drafts:
        if not d:
            cut.append(d)
            continue
        room = share + (1 if extra > 0 else 0)
        extra -= 1 if extra > 0 else 0
        cut.append(d[:room])
    return cut
