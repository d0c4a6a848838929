"""llama-server's members of ``GET /models`` and ``/v1/models`` that need a loaded worker: each loaded
model's ``meta``, and in single-model mode the same model in Ollama's list shape under ``models``.

The list itself is the fold's. llama-server (``get_res_model_info``, ``get_res_models`` in
``tools/server/server-context.cpp``; its router's list in ``server-models.cpp``) adds ``meta`` to a
model it has loaded: vocabulary, context, size and type, which only the loaded model knows. So they
come from the worker's own ``/v1/models`` once it is ready, read once per worker (an instance's
model does not change), and are absent while it is not loaded. Only this node's workers are asked:
another node's are on its loopback.
"""

from __future__ import annotations

from typing import Any

import httpx
import msgspec

from service.api.schemas import ModelEntry, ModelList
from service.core.state import InstanceStatus, RouterState

META_KEYS = ("vocab_type", "n_vocab", "n_ctx", "n_ctx_train", "n_embd", "n_params", "size", "ftype")
_KEPT = 64  # instances whose meta is remembered; older ones are read again if still asked for


def ollama_entry(name: str, multimodal: bool) -> dict[str, Any]:
    """llama-server's ``models`` entry: a name and capabilities, the rest empty (it manages no hashes)."""
    return {
        "name": name, "model": name, "modified_at": "", "size": "", "digest": "", "type": "model",
        "description": "", "tags": [""], "capabilities": ["completion", "multimodal"] if multimodal else ["completion"],
        "parameters": "", "details": {"parent_model": "", "format": "gguf", "family": "", "families": [""],
                                      "parameter_size": "", "quantization_level": ""},
    }  # fmt: skip


class WorkerMeta:
    """The loaded models' ``meta``, read from their workers once per instance."""

    def __init__(self) -> None:
        self._by_instance: dict[str, dict[str, Any]] = {}

    async def of(self, http: httpx.AsyncClient, instance_id: str, endpoint: str) -> dict[str, Any] | None:
        known = self._by_instance.get(instance_id)
        if known is not None:
            return known
        try:
            answer = await http.get(f"{endpoint}/v1/models", timeout=5.0)
            raw = answer.json()["data"][0]["meta"]
        except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError):
            return None  # stopping, or not an answer: the list goes out without it
        meta = {k: raw[k] for k in META_KEYS if k in raw}
        if len(self._by_instance) >= _KEPT:
            self._by_instance.pop(next(iter(self._by_instance)))
        self._by_instance[instance_id] = meta
        return meta

    async def listing(
        self, listing: ModelList, state: RouterState, http: httpx.AsyncClient, *, node: str | None, single: bool
    ) -> ModelList:
        """``listing`` with each of this node's loaded models' ``meta``, and in single-model mode ``models``."""
        entries = [await self._entry(e, state, http, node) for e in listing.data]
        if not single or len(entries) != 1:
            return msgspec.structs.replace(listing, data=entries)
        multimodal = bool({"image", "audio"} & set(entries[0].architecture.input_modalities))
        return msgspec.structs.replace(listing, data=entries, models=[ollama_entry(entries[0].id, multimodal)])

    async def _entry(
        self, entry: ModelEntry, state: RouterState, http: httpx.AsyncClient, node: str | None
    ) -> ModelEntry:
        model = state.models.get(entry.id)
        inst = model.instance if model is not None else None
        if inst is None or inst.status is not InstanceStatus.READY or not inst.endpoint or inst.node != node:
            return entry
        meta = await self.of(http, inst.instance_id, inst.endpoint)
        return entry if meta is None else msgspec.structs.replace(entry, meta=meta)
