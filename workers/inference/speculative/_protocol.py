"""What a drafter is: llama.cpp's ``common_speculative_impl``, for the batch engine's slots.

A drafter proposes the tokens a slot's sequence may continue with; the engine verifies them in its
next decode and tells the drafter how many the target accepted. Each slot is one sequence (``seq``,
the slot's id); a drafter keeps whatever per-sequence state it needs between those calls.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class Drafter(Protocol):
    """One ``--spec-type``'s drafting (llama.cpp's ``begin``/``draft``/``accept``)."""

    name: str

    @property
    def n_max(self) -> int:
        """The longest draft it makes (before the engine's limits)."""

    def begin(self, seq: int, prompt: Sequence[int]) -> None:
        """A request starts in ``seq`` with ``prompt``, its tokens as the slot holds them."""

    def draft(self, seq: int, history: Sequence[int], last: int, n_max: int, *, alone: bool = True) -> list[int]:
        """Up to ``n_max`` tokens to follow ``history`` (what the sequence holds) and ``last``, the
        token just sampled and not yet decoded; empty: no proposal. ``alone``: the sequence is the step's
        only one generating, so its drafted rows are cheap beside the step a hit saves, and a drafter may
        offer weaker guesses too."""

    def accept(self, seq: int, n_accepted: int) -> None:
        """The target accepted the first ``n_accepted`` tokens of this drafter's last draft for ``seq``."""
