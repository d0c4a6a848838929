"""Preemption by recompute: a full shared KV pool takes a slot back instead of failing every reply.

With one KV pool (``--kv-unified``) all slots share its cells. When not one more token finds room
(after an idle slot's cells were freed and the batch halved, ``StepMixin._decode_failed``),
llama-server aborts every running reply with a 500. Here, as vLLM's scheduler does, the youngest
running request gives its slot back: its cells go, and it waits at the head of the queue with what
it must evaluate again (its prompt and the tokens it generated, the last one sampled but not yet
decoded). Its sampler chain, text stream (stop strings held back), reasoning and grammar state,
timings and token count stay with it, so when it is admitted again (reusing cached cells as any
admission does) it goes on with the next token as if it had kept its slot: its client sees a pause.

The youngest goes because it has the least invested, and because then the oldest running request
is never preempted: it always progresses, so preemptions cannot go round in a circle. A preempted
request is admitted again only once its tokens and the running requests' fit the pool
(:func:`fits_again`), or it would take the cells back at once and be preempted again.
"""

from __future__ import annotations

from workers.inference.engine._slots import Request, Resume, Slot, SlotState, Timings


def preempt(slot: Slot, now: float) -> Request:
    """Take the slot back from its request, which keeps what it needs to go on; the slot is idle
    (its cells are the engine's to drop). A prefilling request starts its prompt afresh (its client
    saw no token), unless it was a resumption: that one's state stands."""
    req = slot.request
    assert req is not None and slot.text is not None
    if slot.state is SlotState.GENERATING:
        state = (slot.text, slot.timings, slot.n_decoded, slot.has_new_line, slot.truncated)
        req.resume = Resume([*slot.cache, slot.pending], state)
    req.n_preempted += 1
    slot.state, slot.request, slot.chain, slot.last_request = SlotState.IDLE, None, None, req
    slot.last_used, slot.batch_index = now, -1
    slot.timings, slot.n_decoded, slot.has_new_line = Timings(), 0, False
    return req


def fits_again(req: Request, slots: list[Slot], n_cells: int) -> bool:
    """Whether ``req`` may be admitted: yes unless it was preempted, then only once its tokens, the
    running requests' cells and the cells their prompts still need leave room in the pool."""
    if not req.n_preempted:
        return True
    held = 0
    for s in slots:
        if s.request is not None and s.is_processing:
            held += len(s.request.feed) if s.state is SlotState.PROMPT else len(s.cache) + 1
    return held == 0 or len(req.feed) + held < n_cells
