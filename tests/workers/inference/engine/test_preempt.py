"""Preemption's bookkeeping (:mod:`workers.inference.engine._preempt`), on plain slots: what a
preempted request keeps, what its next slot takes back, and when it may be admitted again."""

from __future__ import annotations

from workers.inference.engine._preempt import fits_again, preempt
from workers.inference.engine._sampling import SamplingParams
from workers.inference.engine._slots import Request, Slot, SlotState


def _running(slot_id: int, prompt: list[int], generated: list[int], pending: int = 99) -> Slot:
    slot = Slot(id=slot_id, n_ctx=256)
    slot.begin(Request(prompt=prompt, params=SamplingParams(), max_tokens=200), 0, now=1.0)
    slot.cache[:] = [*prompt, *generated]
    slot.state, slot.pending, slot.n_decoded = SlotState.GENERATING, pending, len(generated) + 1
    assert slot.text is not None
    slot.text.feed(b"partial \xe2")  # half a character held back: the stream must go on from it
    return slot


def test_a_generating_request_keeps_its_tokens_and_state_and_its_next_slot_takes_them_back() -> None:
    slot = _running(0, [1, 2, 3], [4, 5])
    text, timings = slot.text, slot.timings
    req = preempt(slot, now=2.0)
    assert slot.state is SlotState.IDLE and slot.request is None and slot.last_request is req
    assert req.resume is not None and req.feed == [1, 2, 3, 4, 5, 99] and req.prompt == [1, 2, 3]
    assert req.n_preempted == 1
    other = Slot(id=1, n_ctx=256)
    other.begin(req, 2, now=3.0)  # two cached tokens reused, as admission finds them
    assert (other.text, other.timings, other.n_decoded) == (text, timings, 3)
    assert other.text is not None and other.text.feed(b"\x82\xac") == "€", "the held byte was kept"


def test_a_prefilling_request_starts_afresh_and_a_resumption_keeps_its_tokens() -> None:
    slot = Slot(id=0, n_ctx=256)
    slot.begin(Request(prompt=[1, 2, 3], params=SamplingParams(), max_tokens=5), 0, now=1.0)
    req = preempt(slot, now=2.0)
    assert req.resume is None and req.feed == [1, 2, 3] and req.n_preempted == 1
    resumed = preempt(_running(1, [1], [2]), now=2.0)
    again = Slot(id=2, n_ctx=256)
    again.begin(resumed, 0, now=3.0)  # preempted again while it evaluates its tokens again
    assert preempt(again, now=4.0).feed == [1, 2, 99]


def test_a_preempted_request_waits_until_it_fits_beside_the_running_ones() -> None:
    fresh = Request(prompt=[1] * 200, params=SamplingParams(), max_tokens=5)
    waiting = preempt(_running(0, [1] * 10, [2] * 100), now=1.0)  # 111 tokens to evaluate again
    busy = _running(1, [3] * 10, [4] * 140)  # 150 cells, and the one it sampled: 151
    assert fits_again(fresh, [busy], 256), "never preempted: admitted as llama-server admits"
    assert not fits_again(waiting, [busy], 256) and fits_again(waiting, [busy], 111 + 151 + 1)
    assert fits_again(waiting, [Slot(id=1, n_ctx=256)], 256), "nothing runs: it goes"
    prefilling = Slot(id=2, n_ctx=256)
    prefilling.begin(Request(prompt=[5] * 150, params=SamplingParams(), max_tokens=5), 0, now=1.0)
    assert not fits_again(waiting, [prefilling], 256), "a prompt being evaluated will take all its cells"
