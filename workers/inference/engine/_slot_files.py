"""A slot's KV cache to a file and back (llama-server's ``POST /slots/{id}?action=save|restore|erase``).

llama.cpp saves one sequence's state with its tokens
(``llama_state_seq_save_file``) and loads it into any sequence
(``llama_state_seq_load_file``). Both touch the context, so they run on the
engine thread between steps: an HTTP thread hands a :class:`SlotAction` to
:meth:`SlotActionsMixin.run_slot_action` and waits for its answer. An action on
a slot that is processing waits for the slot to be idle, as llama-server defers
it.
"""

from __future__ import annotations

import ctypes
import queue
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from workers.inference.engine._errors import EngineNotReady, RequestRejected
from workers.inference.engine._slots import Slot, holds_media
from workers.inference.engine._views import Done, SlotAnswer, SlotErased, SlotRestored, SlotSaved

if TYPE_CHECKING:
    from workers.inference.engine._kept_logits import KeptLogits
    from workers.inference.llama import LlamaModel


@dataclass
class SlotAction:
    """``save``, ``restore`` or ``erase`` of slot ``slot_id``; ``path`` for the first two. ``lora``
    (``POST /lora-adapters``) sets every adapter's scale once all slots are idle."""

    action: str
    slot_id: int
    path: str = ""
    filename: str = ""
    scales: tuple[float, ...] = ()
    out: queue.SimpleQueue[Any] = field(default_factory=queue.SimpleQueue)


def _save(llm: LlamaModel, slot: Slot, act: SlotAction) -> SlotSaved:
    if holds_media(slot):  # an image's stand-in tokens mean nothing in another process
        raise RequestRejected("Unable to save slot: it holds image tokens, which a slot file cannot carry")
    t0 = time.perf_counter()
    tokens = (llm.lc.llama_token * max(1, len(slot.cache)))(*slot.cache)
    n = int(llm.lc.llama_state_seq_save_file(llm.ctx, act.path.encode(), slot.id, tokens, len(slot.cache)))
    if n == 0:
        raise RequestRejected("Unable to save slot")
    ms = (time.perf_counter() - t0) * 1000.0
    return {
        "id_slot": slot.id,
        "filename": act.filename,
        "n_saved": len(slot.cache),
        "n_written": n,
        "timings": {"save_ms": round(ms, 3)},
    }


def _restore(llm: LlamaModel, slot: Slot, act: SlotAction) -> SlotRestored:
    t0 = time.perf_counter()
    cap = llm.n_ctx
    tokens = (llm.lc.llama_token * cap)()
    count = ctypes.c_size_t(0)
    llm.seq_rm(slot.id, 0, -1)
    slot.cache.clear()
    n = int(llm.lc.llama_state_seq_load_file(llm.ctx, act.path.encode(), slot.id, tokens, cap, ctypes.byref(count)))
    if n == 0:
        llm.seq_rm(slot.id, 0, -1)
        raise RequestRejected("Unable to restore slot: No available space in KV cache or invalid slot save file")
    restored = list(tokens[: count.value])
    if any(not 0 <= t < llm.n_vocab for t in restored):
        llm.seq_rm(slot.id, 0, -1)
        raise RequestRejected("Unable to restore slot: Invalid tokens in slot save file")
    slot.cache.extend(restored)
    slot.lora = llm.lora.key  # a saved slot's adapters are unknown: taken as the worker's own
    ms = (time.perf_counter() - t0) * 1000.0
    return {
        "id_slot": slot.id,
        "filename": act.filename,
        "n_restored": len(restored),
        "n_read": n,
        "timings": {"restore_ms": round(ms, 3)},
    }


def _erase(llm: LlamaModel, slot: Slot, _act: SlotAction) -> SlotErased:
    n = len(slot.cache)
    llm.seq_rm(slot.id, 0, -1)
    slot.cache.clear()
    return {"id_slot": slot.id, "n_erased": n}


def _set_lora(llm: LlamaModel, slots: list[Slot], act: SlotAction) -> Done:
    """New adapter scales; every slot's cached tokens were computed with the old ones, so they go."""
    for adapter, scale in zip(llm.lora.adapters, act.scales, strict=True):
        adapter.scale = scale
    llm.lora.apply(llm.lc, llm.ctx)
    for s in slots:
        llm.seq_rm(s.id, 0, -1)
        s.cache.clear()
        s.lora = llm.lora.key
    return {"success": True}


_ACTIONS = {"save": _save, "restore": _restore, "erase": _erase}  # per slot; "lora" takes them all


class SlotActionsMixin:
    """The batch engine's slot actions: queued by HTTP threads, run between steps."""

    llm: LlamaModel | None
    slots: list[Slot]
    _cv: threading.Condition
    _idle: threading.Event
    _accepting: bool
    _actions: deque[SlotAction]
    kept: KeptLogits

    def run_slot_action(self, act: SlotAction, timeout: float = 300.0) -> SlotAnswer:
        """Run ``act`` on the engine thread and return llama-server's answer (raises its error)."""
        if act.action not in (*_ACTIONS, "lora"):
            raise RequestRejected("Invalid action")
        if act.action != "lora" and not 0 <= act.slot_id < len(self.slots):
            raise RequestRejected("Invalid slot ID")
        with self._cv:
            if not self._accepting:
                raise EngineNotReady()
            self._actions.append(act)
            self._idle.clear()
            self._cv.notify()
        try:
            result = act.out.get(timeout=timeout)
        except queue.Empty:
            raise RequestRejected(f"slot {act.slot_id} stayed busy for {timeout:.0f} s") from None
        if isinstance(result, BaseException):
            raise result
        answer: SlotAnswer = result
        return answer

    def _run_slot_actions(self) -> None:
        """Run the queued actions whose slot is idle; the others wait for a later step."""
        assert self.llm is not None
        with self._cv:
            todo, self._actions = list(self._actions), deque()
        for act in todo:
            busy = self.slots if act.action == "lora" else [self.slots[act.slot_id]]
            if any(s.is_processing for s in busy):
                with self._cv:
                    self._actions.append(act)
                continue
            for s in busy:
                self.kept.forget(s.id)  # every action changes the slot's cells
            try:
                if act.action == "lora":
                    act.out.put(_set_lora(self.llm, self.slots, act))
                else:
                    act.out.put(_ACTIONS[act.action](self.llm, busy[0], act))
            except Exception as exc:  # delivered to the HTTP thread that waits for it
                act.out.put(exc)
