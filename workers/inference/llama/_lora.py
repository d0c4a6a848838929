"""LoRA adapters on a loaded model, as llama-server's ``--lora``, ``--lora-scaled`` and ``/lora-adapters``.

llama.cpp loads each adapter file once for the model (``llama_adapter_lora_init``)
and applies a list of them, each with its scale, to a context
(``llama_set_adapters_lora``). The list is the context's, so it is global to
the worker, as llama-server's ``POST /lora-adapters`` sets it: every slot
decodes with the same adapters (llama-server's per-request ``lora`` member is
refused, see docs/llama-cpp-compat.md).
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any


class LoraError(ValueError):
    """A bad adapter file or a bad ``/lora-adapters`` body."""


@dataclass
class Adapter:
    path: str
    scale: float
    ptr: Any = None  # llama_adapter_lora*, freed with the model


def parse_specs(plain: list[str], scaled: list[str]) -> list[tuple[str, float]]:
    """``--lora A,B`` (scale 1) and ``--lora-scaled A:0.5,B:2`` → ``[(path, scale)]``, in that order."""
    out = [(p, 1.0) for arg in plain for p in arg.split(",") if p]
    for item in (i for arg in scaled for i in arg.split(",") if i):
        path, _, scale = item.rpartition(":")
        try:
            out.append((path, float(scale)))
        except ValueError:
            path = ""
        if not path:
            raise LoraError(f"--lora-scaled expects FNAME:SCALE, got {item!r}")
    return out


class LoraSet:
    """The model's adapters and their current scales (read from any thread, changed on the engine's)."""

    def __init__(self) -> None:
        self.adapters: list[Adapter] = []

    def load(self, lc: Any, model: Any, ctx: Any, specs: list[tuple[str, float]]) -> None:
        for path, scale in specs:
            ptr = lc.llama_adapter_lora_init(model, path.encode())
            if not ptr:
                raise LoraError(f"failed to load LoRA adapter {path!r} (not a LoRA GGUF for this model)")
            self.adapters.append(Adapter(path, scale, ptr))
        if self.adapters:
            self.apply(lc, ctx)

    def apply(self, lc: Any, ctx: Any) -> None:
        """Give the context the adapters whose scale is not 0 (llama-server skips those too)."""
        active = [a for a in self.adapters if a.scale != 0.0]
        ptrs = (lc.llama_adapter_lora_p_ctypes * max(1, len(active)))(*[a.ptr for a in active])
        scales = (ctypes.c_float * max(1, len(active)))(*[a.scale for a in active])
        if int(lc.llama_set_adapters_lora(ctx, ptrs, len(active), scales)) != 0:
            raise LoraError("llama.cpp refused the LoRA adapters")

    def scales_for(self, body: Any) -> list[float]:
        """llama-server's ``parse_lora_request``: ``[{"id", "scale"}]``; adapters not named get 0."""
        if not isinstance(body, list):
            raise LoraError("Request body must be an array")
        given: dict[int, float] = {}
        for entry in body:
            if not isinstance(entry, dict):
                raise LoraError("each entry must be an object {id, scale}")
            ident, scale = entry.get("id", -1), entry.get("scale", 0.0)
            if not isinstance(ident, int) or isinstance(ident, bool):
                raise LoraError("'id' must be an integer")
            if not isinstance(scale, int | float) or isinstance(scale, bool):
                raise LoraError("'scale' must be a number")
            if not 0 <= ident < len(self.adapters):
                raise LoraError(f"invalid adapter id {ident}")
            given[ident] = float(scale)
        return [given.get(i, 0.0) for i in range(len(self.adapters))]

    def to_json(self) -> list[dict[str, Any]]:
        """llama-server's ``GET /lora-adapters``."""
        return [
            {"id": i, "path": a.path, "scale": a.scale, "task_name": "", "prompt_prefix": ""}
            for i, a in enumerate(self.adapters)
        ]
