"""Images in a slot's prompt: where prefill stops for them, and their decode (the batch engine's part).

A request's prompt holds each image as a run of ``n_tokens`` stand-in tokens
(:func:`workers.inference.llama._mtmd.media_token`); ``request.media`` maps the run's start
to its embeddings. Text still goes through the step's shared batch, but a text
chunk ends where an image starts, and the image is decoded by itself
(``llama_decode`` of embeddings, which cannot share a batch of token ids) in
the slot's sequence, once the text before it is in. Prefix reuse keeps an image
only when the cached run is the same image (same stand-in token), and never
stops inside one: a half image cannot be resumed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from workers.inference.engine._errors import EngineError, EngineFailed
from workers.inference.engine._slots import Request, Slot, SlotState

if TYPE_CHECKING:
    from workers.inference.engine._metrics import EngineMetrics


def keep_whole_media(req: Request, n_keep: int) -> int:
    """``n_keep`` moved back to the start of an image it would cut in two."""
    if req.media is None:
        return n_keep
    for start, chunk in req.media.media.items():
        if start < n_keep < start + chunk.n_tokens:
            return int(start)
    return n_keep


def pos_delta(req: Request, n_keep: int) -> int:
    """Positions minus cells before ``n_keep``: images of M-RoPE models take fewer positions than tokens."""
    if req.media is None:
        return 0
    return sum(c.n_pos - c.n_tokens for start, c in req.media.media.items() if start + c.n_tokens <= n_keep)


def text_end(req: Request, done: int, budget: int) -> int:
    """Where this step's text chunk of the prompt ends: ``budget`` tokens on, or at the next image."""
    end = min(len(req.feed), done + budget)
    if req.media is not None:
        for start in req.media.media:
            if done <= start < end:
                end = start
    return end


def media_at(slot: Slot) -> Any:
    """The image the slot's prefill has reached, or None."""
    req = slot.request
    if req is None or req.media is None:
        return None
    return req.media.media.get(slot.n_prompt_done)


def decode_media(llm: Any, slot: Slot, chunk: Any) -> int:
    """Decode ``chunk`` (the image ``media_at(slot)`` found) into the slot's sequence; 0 on success.

    The slot's cache and counters move past the image, as prefill of its tokens would.
    """
    pos = len(slot.cache) + slot.pos_delta
    ret = int(llm.projector.decode(llm.ctx, chunk, pos, slot.id))
    if ret != 0:
        return ret
    assert slot.request is not None
    slot.cache.extend(slot.request.prompt[chunk.start : chunk.start + chunk.n_tokens])
    slot.n_prompt_done += chunk.n_tokens
    slot.timings.on_prompt(chunk.n_tokens, time.monotonic())
    slot.pos_delta += chunk.n_pos - chunk.n_tokens
    return 0


def decode_reached_media(
    llm: Any, slots: list[Slot], fail: Callable[[Slot, EngineError], None], metrics: EngineMetrics
) -> None:
    """Decode the image each prefilling slot has reached (before the step's text batch); a decode
    that fails ends that slot's request with ``fail``. Its tokens count as prompt tokens processed,
    its decode not in ``n_decode`` (llama-server's count leaves multimodal decodes out)."""
    for s in slots:
        chunk = media_at(s) if s.state is SlotState.PROMPT else None
        if chunk is None:
            continue
        t_decode = time.monotonic()
        if (ret := decode_media(llm, s, chunk)) != 0:
            fail(s, EngineFailed(f"llama_decode failed on an image ({ret})"))
        else:
            metrics.on_prompt(chunk.n_tokens, time.monotonic() - t_decode)
