"""LoRA adapters on a loaded model, as llama-server's ``--lora``, ``--lora-scaled`` and ``/lora-adapters``.

llama.cpp loads each adapter file once for the model (``llama_adapter_lora_init``)
and applies a list of them, each with its scale, to a context
(``llama_set_adapters_lora``). The list is the context's: the worker's own
scales (``--lora-scaled``, ``POST /lora-adapters``) unless a request names its
own (llama-server's per-request ``lora``). A set is a :data:`LoraKey`, the
adapters with a scale other than 0 (scale 0 is no adapter, as llama-server
skips those), so equal sets compare equal; the engine decodes each set's slots
in a ``llama_decode`` of their own (``engine._batch``), applying a set only when
it differs from the context's (:meth:`LoraSet.use`).
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any, TypedDict

LoraKey = tuple[tuple[int, float], ...]
"""An adapter set: ``(adapter id, scale)`` for each adapter whose scale is not 0, by id."""
BAD_REQUEST_LORA = "Error: 'lora' must be an array of objects with 'id' and 'scale' fields"  # server-schema.cpp


def key_of(scales: list[float]) -> LoraKey:
    return tuple((i, s) for i, s in enumerate(scales) if s != 0.0)


class AdapterView(TypedDict):
    """One adapter of llama-server's ``GET /lora-adapters``."""

    id: int
    path: str
    scale: float
    task_name: str
    prompt_prefix: str


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
        self.applied: LoraKey = ()  # the set the context has now

    @property
    def key(self) -> LoraKey:
        """The worker's own set (what a request without ``lora`` decodes with)."""
        return key_of([a.scale for a in self.adapters])

    def load(self, lc: Any, model: Any, ctx: Any, specs: list[tuple[str, float]]) -> None:
        for path, scale in specs:
            ptr = lc.llama_adapter_lora_init(model, path.encode())
            if not ptr:
                raise LoraError(f"failed to load LoRA adapter {path!r} (not a LoRA GGUF for this model)")
            self.adapters.append(Adapter(path, scale, ptr))
        if self.adapters:
            self.apply(lc, ctx)

    def apply(self, lc: Any, ctx: Any) -> None:
        """Give the context the worker's own set."""
        self.use(lc, ctx, self.key, force=True)

    def use(self, lc: Any, ctx: Any, key: LoraKey, *, force: bool = False) -> None:
        """Give the context the set ``key`` (nothing to do when it has it already)."""
        if key == self.applied and not force:
            return
        n = len(key)
        ptrs = (lc.llama_adapter_lora_p_ctypes * max(1, n))(*[self.adapters[i].ptr for i, _ in key])
        scales = (ctypes.c_float * max(1, n))(*[scale for _, scale in key])
        if int(lc.llama_set_adapters_lora(ctx, ptrs, n, scales)) != 0:
            raise LoraError("llama.cpp refused the LoRA adapters")
        self.applied = key

    def request_key(self, lora: Any) -> LoraKey:
        """A request's own ``lora`` (``[{"id", "scale"}]``, adapters not named at 0) as a set."""
        if not isinstance(lora, list):
            raise LoraError(BAD_REQUEST_LORA)
        return key_of(self.scales_for(lora))

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

    def to_json(self) -> list[AdapterView]:
        """llama-server's ``GET /lora-adapters``."""
        return [
            {"id": i, "path": a.path, "scale": a.scale, "task_name": "", "prompt_prefix": ""}
            for i, a in enumerate(self.adapters)
        ]
