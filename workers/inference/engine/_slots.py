"""Slots: one sequence of the shared context each, and what a request needs while it runs.

A slot is IDLE (maybe holding a cached prompt), PROMPT (prefilling its
request's prompt, a chunk per step) or GENERATING (one token per step). A slot
owns sequence id ``slot.id`` in the KV cache; ``slot.cache`` lists the tokens
whose cells that sequence holds, which is what prefix reuse compares against.
"""

from __future__ import annotations

import enum
import itertools
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from workers.inference.engine._reasoning import ReasoningControl
from workers.inference.engine._sampling import GreedyPick, SamplingParams
from workers.inference.engine._text_stream import TextStream
from workers.inference.engine._views import SlotView
from workers.inference.speculative import LLAMA_DEFAULT_SEED

_request_ids = itertools.count(1)


class SlotState(enum.Enum):
    IDLE = "idle"  # free; its cached tokens are reusable, and evictable when cells run short
    PROMPT = "prompt"  # prefilling, a chunk of at most n_batch tokens per step
    GENERATING = "generating"  # one token per step until EOG, a stop string, max_tokens or the context end


@dataclass
class Request:
    """One generation as the engine runs it; built on an HTTP thread, consumed through ``out``.

    ``out`` receives ``("t", text, logprobs | None, timings | None, ids)`` pieces (``timings``: the
    timings so far with ``timings_per_token``; ``ids``: the tokens the piece's text came from), then
    exactly one ``("d", finish_reason, timings, info)`` (``info``: ``tokens``, ``id_slot``,
    ``tokens_cached``, ``stopping_word``, ``truncated``) or ``("e", EngineError)``; with ``return_progress`` also
    ``("p", prompt_progress)`` as it starts and after each prompt chunk (llama-server's, streams only).
    """

    prompt: list[int]
    params: SamplingParams
    max_tokens: int  # <= 0: until the context is full
    stop: tuple[str, ...] = ()
    cache_prompt: bool = True
    n_keep: int = 0  # prompt tokens a context shift keeps (-1: all of them)
    chain: Any = None  # its sampler chain, built on the HTTP thread; freed by the engine
    media: Any = None  # the prompt's images (a llama._mtmd.MediaPrompt), or None: see engine._media
    lora: tuple[tuple[int, float], ...] | None = None  # its own adapter set (llama.LoraKey); None: the worker's
    id_slot: int = -1  # llama-server's id_slot: the slot it must run in (modulo the slots), -1: any
    n_cache_reuse: int = 0  # llama-server's: cached runs of at least this many tokens are shifted into place
    cmpl_id: str = ""  # the completion's id as its answer gives it (``chatcmpl-…``): what a control names
    reasoning: ReasoningControl | None = None  # reasoning_control: its reasoning may be ended from outside
    return_progress: bool = False  # llama-server's: ("p", prompt_progress) events while the prompt is evaluated
    timings_per_token: bool = False  # llama-server's: each ("t", ...) event carries the timings so far
    greedy: GreedyPick | None = None  # its chain as a pick of the best logit (_sampling.greedy_pick), or None
    seed: int = LLAMA_DEFAULT_SEED  # its chain's seed (its own, else the worker's --seed): synthetic acceptance's too
    resume: Resume | None = None  # preempted while generating: what it evaluates again, its state (_preempt)
    n_preempted: int = 0  # times a full KV pool took its slot back
    tokens: list[int] = field(default_factory=list)  # the reply's tokens as sampled (engine thread)
    n_sent_tokens: int = 0  # how many of them went out with a piece
    id: int = field(default_factory=lambda: next(_request_ids))
    out: queue.SimpleQueue[tuple[Any, ...]] = field(default_factory=queue.SimpleQueue)
    cancelled: threading.Event = field(default_factory=threading.Event)
    enqueued_at: float = field(default_factory=time.monotonic)

    @property
    def feed(self) -> list[int]:
        """The tokens its slot evaluates: the prompt, or a preempted reply's prompt and tokens so far."""
        return self.prompt if self.resume is None else self.resume.tokens


@dataclass
class Timings:
    """llama-server's ``timings`` object (``server_slot_stats``): what was evaluated, and how fast.

    Times are ``time.monotonic()`` stamps, 0 until reached: ``t_prompt_last`` moves with each prompt
    batch and then to the first token's sampling, ``t_gen_last`` with each token generated, so the
    object reads right at any point of a request (a stream's prompt progress included). The first
    token comes from the last prompt batch's logits, no decode of its own: the generation rate is
    over ``predicted_n - 1`` steps, as llama-server's ``n_gen_steps()``; and, as there, no rounding.
    """

    cache_n: int = 0
    prompt_n: int = 0
    predicted_n: int = 0
    t_start: float = 0.0
    t_prompt_last: float = 0.0
    t_gen_last: float = 0.0
    draft_n: int = 0  # tokens drafted for this request (speculative decoding)
    draft_n_accepted: int = 0  # of them, those the target's sampling took

    def prompt_seconds(self) -> float:
        return self.t_prompt_last - self.t_start if self.t_prompt_last else 0.0

    def gen_seconds(self) -> float:
        # at least 1 us, as llama-server: the first token can land in the same microsecond as the prompt
        return max(self.t_gen_last - self.t_prompt_last, 1e-6) if self.t_gen_last else 0.0

    def gen_steps(self) -> int:
        return max(self.predicted_n - 1, 0)

    def on_prompt(self, n_tokens: int, now: float) -> None:
        """``n_tokens`` more prompt tokens evaluated, the batch done at ``now``."""
        self.prompt_n += n_tokens
        self.t_prompt_last = now

    def on_token(self, now: float) -> None:
        """A token generated at ``now`` (the first one ends the prompt's time)."""
        self.predicted_n += 1
        if self.predicted_n == 1:
            self.t_prompt_last = now
        self.t_gen_last = now

    def to_json(self) -> dict[str, float | int]:
        prompt_ms, predicted_ms, steps = self.prompt_seconds() * 1e3, self.gen_seconds() * 1e3, self.gen_steps()
        drafts = {"draft_n": self.draft_n, "draft_n_accepted": self.draft_n_accepted} if self.draft_n else {}
        return {
            "cache_n": self.cache_n,
            "prompt_n": self.prompt_n,
            "prompt_ms": prompt_ms,
            "prompt_per_token_ms": prompt_ms / self.prompt_n if self.prompt_n else 0.0,
            "prompt_per_second": 1e3 / prompt_ms * self.prompt_n if prompt_ms > 0 else 0.0,
            "predicted_n": self.predicted_n,
            "predicted_ms": predicted_ms,
            "predicted_per_token_ms": predicted_ms / steps if steps else 0.0,
            "predicted_per_second": 1e3 / predicted_ms * steps if predicted_ms > 0 else 0.0,
            **drafts,  # as llama-server: only when the request drafted
        }


@dataclass
class Resume:
    """A request preempted while generating (:mod:`~workers.inference.engine._preempt`): the tokens
    its slot held and the one it sampled last, evaluated again when it is admitted again (the last
    one's logits give its next token), and its slot's state: text stream, timings, tokens counted."""

    tokens: list[int]
    state: tuple[TextStream, Timings, int, bool, bool]  # text, timings, n_decoded, has_new_line, truncated


@dataclass
class Slot:
    """One parallel sequence; mutated only by the engine thread (read by ``/slots`` under its lock)."""

    id: int
    n_ctx: int
    state: SlotState = SlotState.IDLE
    request: Request | None = None
    cache: list[int] = field(default_factory=list)
    chain: Any = None  # the request's sampler chain
    n_prompt_done: int = 0  # prompt tokens whose cells exist (reused + evaluated)
    pending: int = -1  # sampled, not yet decoded
    draft: list[int] = field(default_factory=list)  # this step's drafted tokens after ``pending`` (engine._speculate)
    spec_types: str = "none"  # the worker's --spec-type (/slots' speculative)
    n_decoded: int = 0
    batch_index: int = -1  # row of this slot's logits in the last batch, or -1
    text: TextStream | None = None
    timings: Timings = field(default_factory=Timings)
    last_used: float = 0.0
    has_new_line: bool = False
    last_request: Request | None = None
    truncated: bool = False  # this request's context filled up (shifted, or stopped short), as llama-server
    pos_delta: int = 0  # a token's position minus its cell index (M-RoPE images take fewer positions)
    lora: tuple[tuple[int, float], ...] = ()  # the adapter set its cells were computed with (llama.LoraKey)

    @property
    def is_processing(self) -> bool:
        return self.state is not SlotState.IDLE

    def begin(self, req: Request, n_keep: int, now: float, pos_delta: int = 0) -> None:
        """Start ``req`` here, its first ``n_keep`` prompt tokens already cached (the engine kept their cells)."""
        del self.cache[n_keep:]
        self.pos_delta = pos_delta
        self.state, self.request, self.chain = SlotState.PROMPT, req, req.chain
        self.n_prompt_done, self.pending, self.n_decoded, self.has_new_line = n_keep, -1, 0, False
        self.truncated = False
        self.text = TextStream(req.stop)
        self.timings = Timings(cache_n=n_keep, t_start=now)
        self.last_used = now
        if req.resume is None:
            self.report_progress(now)
        else:  # a preempted reply goes on as it was (engine._preempt)
            r = req.resume
            self.text, self.timings, self.n_decoded, self.has_new_line, self.truncated = r.state

    def report_progress(self, now: float) -> None:
        """llama-server's ``prompt_progress`` to a request that asked for it (``return_progress``): the
        prompt's size, the tokens its cache gave, the tokens evaluated so far (those included)."""
        req = self.request
        if req is not None and req.return_progress:
            elapsed = round((now - self.timings.t_start) * 1000.0, 3)
            progress = {"total": len(req.prompt), "cache": self.timings.cache_n, "processed": self.n_prompt_done}
            req.out.put(("p", {**progress, "time_ms": elapsed}))

    def end(self, now: float) -> None:
        """Back to idle; the request stays as ``last_request`` for ``/slots`` (its cells are the engine's to drop).

        Its counts go, as llama-server's ``server_slot::reset()`` clears a released slot's stats: an idle
        slot shows 0 tokens processed, cached and decoded, and ``n_remain`` -1 (no budget left over)."""
        if self.request is not None:
            self.request.media = None  # its images (pixels, embeddings) go now, not with the slot's next request
        self.state, self.request, self.chain, self.last_request = SlotState.IDLE, None, None, self.request
        self.last_used, self.batch_index = now, -1
        self.timings, self.n_decoded, self.has_new_line = Timings(), 0, False

    def remaining(self) -> int:
        """Tokens the request may still generate (-1: until the context end, or no request running)."""
        req = self.request
        if req is None or req.max_tokens <= 0:
            return -1
        return max(req.max_tokens - self.n_decoded, 0)

    def to_json(self) -> SlotView:
        """llama-server's ``/slots`` entry (without the prompt and generated text)."""
        out: SlotView = {"id": self.id, "n_ctx": self.n_ctx, "speculative": self.spec_types != "none"}
        out["is_processing"] = self.is_processing
        out["n_cached"] = len(self.cache)  # modelrouter's: tokens whose KV cells the slot holds
        req = self.request or self.last_request
        if req is None:
            return out
        out["id_task"] = req.id
        out["n_prompt_tokens"] = len(req.prompt)
        out["n_prompt_tokens_processed"] = self.timings.prompt_n
        out["n_prompt_tokens_cache"] = self.timings.cache_n
        out["params"] = {
            **req.params.to_json(),
            "n_predict": req.max_tokens or -1,
            "stop": list(req.stop),
            "lora": [{"id": i, "scale": scale} for i, scale in req.lora or ()],
            "speculative.types": self.spec_types,
        }
        out["next_token"] = [
            {
                "has_next_token": self.is_processing,
                "has_new_line": self.has_new_line,
                "n_remain": self.remaining(),
                "n_decoded": self.n_decoded,
            }
        ]
        return out


def common_prefix(a: list[int], b: list[int]) -> int:
    """Length of the common prefix of two token lists."""
    n = min(len(a), len(b))
    i = 0
    # Compare in blocks first: long shared chat histories are the common case.
    while i + 64 <= n and a[i : i + 64] == b[i : i + 64]:
        i += 64
    while i < n and a[i] == b[i]:
        i += 1
    return i


SLOT_SIMILARITY = 0.1
"""llama-server's ``--slot-prompt-similarity``: the share of a prompt a slot's cache must cover to be picked for it."""


def holds_media(slot: Slot) -> bool:
    """Whether the slot's cells include an image's (stand-in tokens, or positions M-RoPE shifted): such
    cells cannot be saved, moved or shifted as plain tokens are."""
    return slot.pos_delta != 0 or any(t < 0 for t in slot.cache)


def reusable_chunks(cache: list[int], prompt: list[int], n_past: int, min_chunk: int) -> list[tuple[int, int, int]]:
    """llama-server's ``--cache-reuse``: after the common prefix ``n_past``, the runs of at least
    ``min_chunk`` cached tokens that come next in ``prompt``, as ``(cache index, prompt index, length)``.
    Shifted into place one after the other, they extend the reusable prefix to the last run's end."""
    moves: list[tuple[int, int, int]] = []
    head_c = head_p = n_past
    while head_c < len(cache) and head_p < len(prompt):
        n = 0
        while head_c + n < len(cache) and head_p + n < len(prompt) and cache[head_c + n] == prompt[head_p + n]:
            n += 1
        if n >= min_chunk:
            moves.append((head_c, head_p, n))
            head_c, head_p = head_c + n, head_p + n
        else:
            head_c += 1
    return moves


def pick_slot(
    slots: list[Slot],
    prompt: list[int],
    similarity: float = SLOT_SIMILARITY,
    lora: tuple[tuple[int, float], ...] = (),
    id_slot: int = -1,
) -> tuple[Slot, int] | None:
    """The idle slot to run ``prompt`` in, and how many of its cached tokens match.

    Like llama-server: slot ``id_slot`` (modulo the slots) if the request names
    one, and None while it is busy; else the idle slot sharing the longest
    prefix if that covers at least ``similarity`` of the prompt, else the least
    recently used one (so other cached conversations survive). Only cells
    computed with the request's adapter set ``lora`` match.
    """
    if id_slot >= 0:
        s = slots[id_slot % len(slots)]
        if s.state is not SlotState.IDLE:
            return None
        return s, common_prefix(s.cache, prompt) if s.lora == lora else 0
    idle = [s for s in slots if s.state is SlotState.IDLE]
    if not idle:
        return None
    best, best_n = None, 0
    for s in idle:
        n = common_prefix(s.cache, prompt) if s.lora == lora else 0
        if n > best_n:
            best, best_n = s, n
    if best is not None and best_n >= similarity * len(prompt):
        return best, best_n
    lru = min(idle, key=lambda s: (bool(s.cache), s.last_used))
    return lru, common_prefix(lru.cache, prompt) if lru.lora == lora else 0


def lora_sets(slots: list[Slot]) -> list[tuple[tuple[int, float], ...]]:
    """The distinct adapter sets of the processing slots, in slot order (one, usually)."""
    sets: list[tuple[tuple[int, float], ...]] = []
    for s in slots:
        if s.state is not SlotState.IDLE and s.lora not in sets:
            sets.append(s.lora)
    return sets


def shift_context(llm: Any, slot: Slot) -> bool:
    """llama-server's context shift: keep the first ``n_keep`` tokens (BOS too), drop half of the
    rest, and slide what follows down; False where the KV cache cannot shift (no memory, SWA, M-RoPE),
    or the prompt holds images."""
    req = slot.request
    if req is None or req.media is not None or not llm.mem or not llm.lc.llama_memory_can_shift(llm.mem):
        return False  # an image cannot be cut in two (llama-server does not shift multimodal prompts either)
    n_keep = len(req.prompt) if req.n_keep < 0 else req.n_keep
    n_keep = min(llm.n_ctx - 4, n_keep + (1 if llm.add_bos else 0))
    n_past = len(slot.cache)
    n_discard = min((n_past - n_keep) // 2, n_past - n_keep - 1)
    if n_discard <= 0:
        return False
    llm.seq_rm(slot.id, n_keep, n_keep + n_discard)
    llm.seq_add(slot.id, n_keep + n_discard, n_past, -n_discard)
    del slot.cache[n_keep : n_keep + n_discard]
    slot.truncated = True
    return True
