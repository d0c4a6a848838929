"""The worker's drafting: its ``--spec-type`` drafters in llama.cpp's priority order, and each slot's
adaptive limit (:mod:`._adaptive`).

A step asks :meth:`Speculator.draft` for each generating slot; the first drafter with a non-empty
proposal wins (llama.cpp's ``common_speculative_draft``), cut to the slot's room and, with adaptive
drafting, to its governor's limit. After the verification, :meth:`Speculator.accept` tells the
winning drafter and the governor how much the target took. While some generating slot has nothing to
draft, :meth:`Speculator.share` drops the others' drafts when each slot has its own KV stream
(:mod:`._step_cost`: there they would be decoded in a pass of their own that every slot waits for).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from workers.inference.speculative._adaptive import DraftGovernor
from workers.inference.speculative._protocol import Drafter
from workers.inference.speculative._step_cost import fit_tile, share_drafts
from workers.inference.speculative._synthetic import LLAMA_DEFAULT_SEED, SynthAcceptance


@dataclass
class SeqStats:
    """One sequence's drafting so far (``/slots``, the debug log)."""

    drafts: int = 0
    drafted: int = 0
    accepted: int = 0


@dataclass
class Speculator:
    """Drafters for ``n_seq`` slots."""

    drafters: list[Drafter]
    n_seq: int
    adaptive: bool = True
    synthetic: SynthAcceptance | None = None  # --spec-synth-*: drafts stand at random (benchmarks)
    governors: list[DraftGovernor] = field(default_factory=list)
    stats: list[SeqStats] = field(default_factory=list)
    _last: dict[int, Drafter] = field(default_factory=dict)
    _begun: dict[int, int] = field(default_factory=dict)  # seq -> the request id it began with
    _length: dict[int, int] = field(default_factory=dict)  # seq -> its history's length at the last draft

    def __post_init__(self) -> None:
        self.governors = [DraftGovernor(self.n_max) for _ in range(self.n_seq)]
        self.stats = [SeqStats() for _ in range(self.n_seq)]

    @property
    def n_max(self) -> int:
        """The most tokens any drafter proposes (llama.cpp's effective ``common_speculative_n_max``)."""
        return max((d.n_max for d in self.drafters), default=0)

    @property
    def names(self) -> list[str]:
        return [d.name for d in self.drafters]

    def begin(self, seq: int, request_id: int, prompt: Sequence[int], seed: int = LLAMA_DEFAULT_SEED) -> None:
        """A request starts in ``seq`` (once per request: a later call with the same id does nothing);
        ``seed``: its sampling seed, synthetic acceptance's too."""
        if self._begun.get(seq) == request_id:
            return
        self._begun[seq] = request_id
        if self.synthetic is not None:
            self.synthetic.begin(seq, seed)
        self.governors[seq] = DraftGovernor(self.governors[seq].n_max)  # a new text: a fresh start
        self._restart(seq, prompt)

    def forget(self, seq: int) -> None:
        """``seq``'s request moved to another slot, or another moved in (engine._compaction): the next
        :meth:`begin` there starts afresh, from the whole history."""
        self._begun.pop(seq, None)

    def _restart(self, seq: int, history: Sequence[int]) -> None:
        self._length[seq] = len(history)
        for d in self.drafters:
            d.begin(seq, history)

    def draft(self, seq: int, history: Sequence[int], last: int, room: int, *, alone: bool = True) -> list[int]:
        """The tokens to verify after ``last`` (at most ``room``), or none; ``alone``: ``seq`` is the step's
        only generating sequence (see :meth:`Drafter.draft`)."""
        if len(history) < self._length.get(seq, 0):  # a context shift dropped tokens: the drafters begin again
            self._restart(seq, history)
        self._length[seq] = len(history)
        limit = min(room, self.governors[seq].allowed()) if self.adaptive else room
        if limit <= 0:
            return []
        for d in self.drafters:
            found = d.draft(seq, history, last, limit, alone=alone)[:limit]
            if found:
                self._last[seq] = d
                return found
        return []

    def share(self, drafts: Sequence[list[int]], *, per_stream: bool, tile: int = 1) -> list[list[int]]:
        """One step's drafts of its generating sequences, none beside a sequence that has none when each
        has its own KV stream, and fitted to the CPU kernels' ``tile`` of rows when they share one
        micro-batch (adaptive drafting only; :mod:`._step_cost`). A dropped draft is not verified; its
        drafter hears nothing of it."""
        if not self.adaptive:
            return list(drafts)
        shared = share_drafts(drafts, per_stream=per_stream)
        return fit_tile(shared, tile) if not per_stream or len(shared) == 1 else shared

    def accept(self, seq: int, drafted: int, accepted: int) -> None:
        """The verification of ``seq``'s draft: ``accepted`` of ``drafted`` tokens taken."""
        stats = self.stats[seq]
        stats.drafts, stats.drafted, stats.accepted = (
            stats.drafts + 1,
            stats.drafted + drafted,
            stats.accepted + accepted,
        )
        self.governors[seq].record(drafted, accepted)
        winner = self._last.pop(seq, None)
        if winner is not None:
            winner.accept(seq, accepted)
