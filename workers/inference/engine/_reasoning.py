"""Reasoning control: llama-server's ``reasoning_control``, ended from outside while it generates.

A chat sent with ``reasoning_control: true`` can have its reasoning ended mid-generation by
``POST /v1/chat/completions/control`` ``{"id", "action": "reasoning_end"}`` (llama-server's
``post_control``, ``common_sampler_reasoning_budget_force``). As llama.cpp's reasoning-budget
sampler does, the request watches its own output for the template's opening tag (or starts
inside the reasoning when the prompt opened it) and, once asked, forces the closing tag token
by token in place of what it would sample; the model then writes its answer after it. Asked
outside its reasoning (not opened yet, or closed), nothing happens, as in llama-server.

The HTTP thread that asks only sets a flag; the state is the engine thread's.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass


@dataclass(frozen=True)
class ThinkTags:
    """One way a template writes reasoning: its opening and closing text, and the tokens forced to close it."""

    open: bytes
    close: bytes
    forced: tuple[int, ...]


class ReasoningControl:
    """A request's reasoning as it generates, and the ask to end it (see the module docstring)."""

    def __init__(self, tags: tuple[ThinkTags, ...], opened: int | None) -> None:
        """``tags``: the template's reasoning tags; ``opened``: the index of the pair the prompt opened, or None."""
        self.tags = tags
        self._open = opened  # the pair whose reasoning runs now, or None
        self._forcing: list[int] = []  # closing tokens still to force
        self._tail = b""  # the last output bytes, where a tag may be forming
        self._keep = max((max(len(t.open), len(t.close)) for t in tags), default=0)
        self._asked = threading.Event()

    @property
    def reasoning(self) -> bool:
        """Whether the output is inside a reasoning block now (read on the engine thread)."""
        return self._open is not None

    def ask_end(self) -> None:
        """End the reasoning at the next token (any thread); a no-op outside the reasoning."""
        self._asked.set()

    def forced_token(self) -> int | None:
        """The token to put in place of sampling, or None to sample (engine thread, before each token)."""
        if self._asked.is_set():
            self._asked.clear()
            if self._open is not None and not self._forcing:
                self._forcing = list(self.tags[self._open].forced)
        return self._forcing[0] if self._forcing else None

    def accept(self, token: int, piece: bytes) -> None:
        """Follow the output (engine thread, after each token): tags open and close the reasoning."""
        if self._forcing and token == self._forcing[0]:
            del self._forcing[0]
            if not self._forcing:
                self._open, self._tail = None, b""
            return
        tail = (self._tail + piece)[-2 * self._keep :] if self._keep else b""
        if self._open is None:
            for i, tag in enumerate(self.tags):
                at = tail.find(tag.open)
                if at >= 0:
                    self._open, tail = i, tail[at + len(tag.open) :]
                    break
        elif self.tags[self._open].close in tail:
            self._open, tail = None, b""
        self._tail = tail
