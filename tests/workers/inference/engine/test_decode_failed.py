"""A ``llama_decode`` error other than "no room" (``1``) fails the requests of the batch's slots, each once.

A slot that both generated and had a prompt chunk in the batch (or is listed twice) gets one failure. The
slots were collected in a set before, and a ``Slot`` (a dataclass with ``==``) is not hashable: the
error became a ``TypeError`` and a 500 that named it, instead of llama.cpp's error.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from workers.inference.engine._errors import EngineError, EngineFailed
from workers.inference.engine._sampling import SamplingParams
from workers.inference.engine._slots import Request, Slot, SlotState
from workers.inference.engine._step import StepMixin


def test_a_failed_decode_fails_each_slot_of_the_batch_once() -> None:
    failed: list[tuple[int, EngineError]] = []
    slots = [Slot(id=i, n_ctx=64, state=SlotState.GENERATING) for i in range(3)]
    for s in slots:
        s.request = Request(prompt=[1, 2], params=SamplingParams(), max_tokens=8)
        s.draft = [5, 6]
    engine: Any = SimpleNamespace(llm=object(), slots=slots, _fail=lambda s, err: failed.append((s.id, err)))
    StepMixin._decode_failed(engine, -1, [slots[0], slots[1]], [(slots[1], [3, 4]), (slots[2], [7])])
    assert sorted(i for i, _ in failed) == [0, 1, 2]
    assert all(isinstance(err, EngineFailed) and str(err) == "llama_decode failed (-1)" for _, err in failed)
    assert all(s.draft == [] and s.batch_index == -1 for s in slots)  # the next step is taken without drafts
    assert engine._skip_drafts is True
