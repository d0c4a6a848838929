"""What a draft costs the slots beside it (modelrouter's, beyond llama-server). Pure: no clock.

Every slot's token of a step waits for the whole ``llama_decode``, and a decode costs about ``fixed`` per
pass over the weights plus ``per_row`` per output row (Gemma 3 270M on two CPU cores: ~12 ms and ~3.5 ms,
the 262k-entry output layer most of the second). How many passes a step takes is llama.cpp's split
(:func:`passes`): with one KV pool (``-np`` auto, ``--kv-unified``) any mix of rows fits one micro-batch;
with a KV stream per slot (an explicit ``-np N``) a micro-batch takes the same number of tokens from each
of a run of consecutive sequences, so one slot's ``k`` drafted tokens beside three slots' single tokens
take a second pass, ``fixed + k * per_row`` more for all four.

The others' requests lose that pass for each such step; the drafting slot's early end gives back one row a
step afterwards. Over a reply of ``S`` steps, a draft of ``k`` tokens all accepted costs the others
``S * fixed / (k + 1)`` (a short draft costs nearly a pass a token; llama-server drafts it anyway, so three
plain stories beside a looping one end ~20 % later). So, with a stream per slot, while some generating
slot has no draft, a draft too short to bring that under :data:`TOLERANCE` of the others' time is dropped
(:func:`share_drafts`); ``fixed / per_row`` is fitted from the worker's own decodes (:class:`StepCost`),
so the rule holds on any machine. With one KV pool a drafted row costs the others one row, which an
accepted token pays back, and the adaptive governor already stops drafts that miss.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

TOLERANCE = 0.03
"""The share of the others' time a draft beside them may cost (the issue's 3 % for drafting at all)."""
DECAY = 0.98
"""Each decode's weight in the fit falls by this per later decode (~50 decodes remembered)."""


def passes(rows_per_seq: Sequence[tuple[int, int]], n_ubatch: int, *, per_stream: bool) -> int:
    """The micro-batches llama.cpp splits a batch into: ``rows_per_seq`` is ``(sequence, rows)`` in the
    batch's order. One KV pool: ``split_simple``, ``n_ubatch`` rows at a time. A stream per sequence:
    ``split_equal(sequential)``, each micro-batch the same number of rows from each sequence of a run of
    consecutive ids, taken in batch order (``llama_batch_allocr::split_equal``)."""
    total = sum(rows for _, rows in rows_per_seq)
    if not per_stream:
        return math.ceil(total / max(n_ubatch, 1))
    left = [[seq, rows] for seq, rows in rows_per_seq if rows > 0]
    count = 0
    while left:
        run = [left[0]]
        for entry in left[1:]:
            if entry[0] == run[-1][0] + 1 and len(run) < n_ubatch:
                run.append(entry)
        take = max(1, min(min(entry[1] for entry in run), n_ubatch // len(run)))
        for entry in run:
            entry[1] -= take
        left = [entry for entry in left if entry[1] > 0]
        count += 1
    return count


@dataclass
class StepCost:
    """A least-squares fit, recent decodes weighing most, of a decode's seconds as
    ``fixed * passes + per_row * rows``."""

    pp: float = 0.0  # weighted sums of passes², passes·rows, rows², passes·seconds, rows·seconds
    pr: float = 0.0
    rr: float = 0.0
    ps: float = 0.0
    rs: float = 0.0

    def observe(self, n_passes: int, rows: int, seconds: float) -> None:
        """One decode of ``rows`` output rows (and no prompt) in ``n_passes`` micro-batches."""
        p, r = float(n_passes), float(rows)
        self.pp = self.pp * DECAY + p * p
        self.pr = self.pr * DECAY + p * r
        self.rr = self.rr * DECAY + r * r
        self.ps = self.ps * DECAY + p * seconds
        self.rs = self.rs * DECAY + r * seconds

    def fixed_rows(self) -> float | None:
        """A pass's fixed cost counted in rows (``fixed / per_row``); None until the decodes seen tell the
        two apart (rows per pass must have varied), or when rows look free."""
        det = self.pp * self.rr - self.pr * self.pr
        if det <= 1e-9 * max(self.pp * self.rr, 1e-300):
            return None
        fixed = (self.ps * self.rr - self.pr * self.rs) / det
        per_row = (self.pp * self.rs - self.pr * self.ps) / det
        if per_row <= 0:
            return None
        return max(fixed, 0.0) / per_row


def shortest_draft(fixed_rows: float, generating: int) -> int:
    """The shortest draft worth its extra pass beside ``generating`` slots (see the module docstring):
    the others' loss, ``fixed / ((k + 1) * (fixed + generating * per_row))`` of their time, within
    :data:`TOLERANCE`."""
    return max(math.ceil(fixed_rows / (TOLERANCE * (fixed_rows + generating))) - 1, 1)


def share_drafts(drafts: Sequence[list[int]], fixed_rows: float | None, *, per_stream: bool) -> list[list[int]]:
    """The drafts of one step's generating slots (in their order). With a KV stream per slot, while some
    slot has none, a draft shorter than :func:`shortest_draft` is dropped; otherwise, or while the cost of
    a pass is not known yet, they stand."""
    drafting = sum(1 for d in drafts if d)
    if not per_stream or fixed_rows is None or drafting in (0, len(drafts)):
        return list(drafts)
    shortest = shortest_draft(fixed_rows, len(drafts))
    return [d if len(d) >= shortest else [] for d in drafts]
