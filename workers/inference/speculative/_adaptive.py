"""Adaptive drafting (modelrouter's, beyond llama-server): how many tokens a slot may draft next.

A verification of ``k`` drafted tokens costs more than a plain step (``k + 1`` rows in the decode),
so a slot whose drafts miss should stop paying for them. Each slot's :class:`DraftGovernor`:

* starts at the drafter's ``n_max``;
* after a verification, allows twice what was accepted (all of it accepted: twice the limit), up to
  ``n_max``: a code edit that matches for a long stretch drafts long, an edit point short;
* after a draft that missed from its first token, allows a quarter; at 0 it drafts nothing for a
  cool-down of 1, 2, 4 ... up to ``MAX_COOLDOWN`` steps, then tries 2 tokens again.

Pure: no clock, the step count is the time.
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_COOLDOWN = 64  # steps without drafting after repeated misses (then a 2-token try)
RETRY_DRAFT = 2  # the draft length tried after a cool-down


@dataclass
class DraftGovernor:
    """One slot's draft limit (see the module's rules)."""

    n_max: int
    limit: int = -1  # -1: n_max (set by __post_init__)
    cooldown: int = 0  # steps left without drafting
    backoff: int = 0  # the next cool-down's length

    def __post_init__(self) -> None:
        if self.limit < 0:
            self.limit = self.n_max

    def allowed(self) -> int:
        """This step's limit; a step in a cool-down counts down and allows nothing."""
        if self.cooldown > 0:
            self.cooldown -= 1
            return 0
        return self.limit

    def record(self, drafted: int, accepted: int) -> None:
        """A verification: ``accepted`` of ``drafted`` tokens matched the target's own choice."""
        if drafted <= 0:
            return
        if accepted > 0:
            grown = 2 * self.limit if accepted == drafted else 2 * accepted
            self.limit, self.backoff = min(self.n_max, max(grown, RETRY_DRAFT)), 0
            return
        self.limit //= 4
        if self.limit == 0:
            self.backoff = min(MAX_COOLDOWN, max(1, 2 * self.backoff))
            self.cooldown, self.limit = self.backoff, min(RETRY_DRAFT, self.n_max)
