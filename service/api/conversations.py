"""The router's conversation → model map for llama-server's resumable streams (``X-Conversation-Id``).

Ephemeral routing state, as llama.cpp's ``conv_model_tracker`` (``server-models.h``):
not an event, not in the fold. A stale entry costs a "not found" the client recovers
from; a restart forgets every entry, and the workers' sessions with them. Each
registration has a ticket: a ``DELETE /v1/stream`` (or a newer request of the same
conversation) invalidates it, which is how a stop cancels a request still waiting
for its model to load. Bounded: the oldest entries go first past ``MAX_ENTRIES``.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from collections.abc import Iterable, Mapping

CONVERSATION_HEADER = "x-conversation-id"
MAX_ENTRIES = 65_536  # far more conversations than a worker keeps sessions for (300 s each)


def conversation_id(headers: Mapping[str, str]) -> str:
    """The request's ``X-Conversation-Id`` (case-insensitive, trimmed), or ``""``."""
    return (headers.get(CONVERSATION_HEADER) or "").strip()


class ConversationOwners:
    """conversation id → (model, ticket); one event loop uses it, so no lock."""

    def __init__(self, max_entries: int = MAX_ENTRIES) -> None:
        self._max = max_entries
        self._tickets = itertools.count(1)
        self._map: OrderedDict[str, tuple[str, int]] = OrderedDict()
        self._subs: set[str] = set()  # the ids with "::" (sub-conversations): lookups scan only these

    def remember(self, conv: str, model: str) -> int:
        """Register ``conv`` as served by ``model``; the ticket (0: nothing registered)."""
        if not conv or not model:
            return 0
        ticket = next(self._tickets)
        self._map.pop(conv, None)
        self._map[conv] = (model, ticket)
        if "::" in conv:
            self._subs.add(conv)
        while len(self._map) > self._max:
            self._subs.discard(self._map.popitem(last=False)[0])
        return ticket

    def alive(self, conv: str, ticket: int) -> bool:
        """False once a stop erased the entry or a newer request replaced it."""
        entry = self._map.get(conv)
        return entry is not None and entry[1] == ticket

    def lookup(self, conv: str) -> str | None:
        entry = self._map.get(conv) if conv else None
        return entry[0] if entry is not None else None

    def forget(self, conv: str) -> None:
        self._map.pop(conv, None)
        self._subs.discard(conv)

    def owners(self, wanted: Iterable[str]) -> dict[str, list[str]]:
        """model → the ids asked about it serves: each id itself, and its ``id::…`` sub-conversations
        (which the workers' lookup reports under the id asked about)."""
        by_model: dict[str, list[str]] = {}
        for rid in dict.fromkeys(wanted):
            prefix = rid + "::"
            convs = [rid, *(c for c in self._subs if c.startswith(prefix))]
            models = {self._map[c][0] for c in convs if c in self._map}
            for model in sorted(models):
                by_model.setdefault(model, []).append(rid)
        return by_model


__all__ = ["CONVERSATION_HEADER", "ConversationOwners", "conversation_id"]
