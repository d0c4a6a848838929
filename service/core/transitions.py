"""Lifecycles as data: allowed transitions, checked by the fold, drawn in the docs.

A lifecycle maps ``(status before, event type) -> status after``; ``None`` on
the left means "no live instance / no such job", on the right "ended". The
fold looks every lifecycle event up here before applying it. A pair that is
not in the table is an impossible transition: the fold leaves the state as
it is and counts it as an anomaly (a bug to look at, never silently applied).

A few pairs are *late* rather than impossible: a worker that was just
killed may still have appended a progress event. ``LATE`` lists those: they
are ignored without being counted.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum

Table = dict[tuple[Enum | None, str], Enum | None]
"""``(status before, event type) -> status after``; None: no instance / job, or ended."""


@dataclass(frozen=True, slots=True)
class Lifecycle:
    """One state machine: its table, the events it ignores when late, its name."""

    name: str
    table: Mapping[tuple[Enum | None, str], Enum | None]
    late: frozenset[tuple[Enum | None, str]]

    def event_types(self) -> frozenset[str]:
        """Every event type this lifecycle reacts to."""
        return frozenset(kind for _, kind in self.table) | frozenset(kind for _, kind in self.late)

    def next_status(self, status: Enum | None, kind: str) -> tuple[bool, Enum | None]:
        """``(allowed, status after)``; not allowed means the fold must not apply it."""
        key = (status, kind)
        if key in self.table:
            return True, self.table[key]
        return False, status

    def is_late(self, status: Enum | None, kind: str) -> bool:
        return (status, kind) in self.late


def edges(pairs: Iterable[tuple[Iterable[Enum | None], str, Enum | str | None]]) -> Table:
    """Build a table from ``(sources, event type, target)`` rows; the target
    ``"same"`` keeps the source status (an event that only updates fields)."""
    table: Table = {}
    for sources, kind, target in pairs:
        for source in sources:
            table[(source, kind)] = source if type(target) is str else target  # type: ignore[assignment]  # str-mixin enums are str too: only the plain "same" means same
    return table


def mermaid(lifecycle: Lifecycle) -> str:
    """The lifecycle as a Mermaid ``stateDiagram-v2`` (docs/architecture.md embeds it;
    a test checks the two agree). Self-loops are left out: they change fields only."""
    lines = ["stateDiagram-v2"]
    for (source, kind), target in sorted(lifecycle.table.items(), key=lambda kv: (_label(kv[0][0]), kv[0][1])):
        if source is target and source is not None:
            continue
        lines.append(f"    {_label(source)} --> {_label(target)}: {kind}")
    return "\n".join(lines)


def _label(status: Enum | None) -> str:
    return "[*]" if status is None else str(status.value)
