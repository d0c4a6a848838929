"""``GET /models`` and ``/v1/models`` in single-model mode, as llama-server answers them: its one model's
``meta`` (read from the loaded worker) and the same model in Ollama's list shape under ``models``.

Router mode lists every model from the fold alone; these two members are llama-server's
single-model answer (``get_res_models``, ``get_res_model_info`` in ``tools/server/server-context.cpp``),
which clients of a plain ``llama-server -m`` read. ``meta`` needs the loaded model, so it comes
from the worker while it is ready (its own ``/v1/models``) and is absent otherwise (llama-server
itself answers nothing before its model is loaded).
"""

from __future__ import annotations

from typing import Any

import httpx
import msgspec

from service.api.schemas import ModelList
from service.core.state import InstanceStatus, RouterState

META_KEYS = ("vocab_type", "n_vocab", "n_ctx", "n_ctx_train", "n_embd", "n_params", "size", "ftype")


def ollama_entry(name: str, multimodal: bool) -> dict[str, Any]:
    """llama-server's ``models`` entry: a name and capabilities, the rest empty (it manages no hashes)."""
    return {
        "name": name, "model": name, "modified_at": "", "size": "", "digest": "", "type": "model",
        "description": "", "tags": [""], "capabilities": ["completion", "multimodal"] if multimodal else ["completion"],
        "parameters": "", "details": {"parent_model": "", "format": "gguf", "family": "", "families": [""],
                                      "parameter_size": "", "quantization_level": ""},
    }  # fmt: skip


async def worker_meta(http: httpx.AsyncClient, endpoint: str) -> dict[str, Any] | None:
    """The loaded model's llama-server ``meta``, from its worker's ``/v1/models``; None if it cannot say."""
    try:
        answer = await http.get(f"{endpoint}/v1/models", timeout=5.0)
        raw = answer.json()["data"][0]["meta"]
    except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError):
        return None  # stopping, or not an answer: the list goes out without it
    return {k: raw[k] for k in META_KEYS if k in raw}


async def single_model_list(listing: ModelList, state: RouterState, http: httpx.AsyncClient) -> ModelList:
    """``listing`` (the one model of single-model mode) with llama-server's ``meta`` and ``models``."""
    if len(listing.data) != 1:
        return listing
    entry = listing.data[0]
    model = state.models.get(entry.id)
    inst = model.instance if model is not None else None
    meta = None
    if inst is not None and inst.status is InstanceStatus.READY and inst.endpoint:
        meta = await worker_meta(http, inst.endpoint)
    if meta is not None:
        entry = msgspec.structs.replace(entry, meta=meta)
    multimodal = bool({"image", "audio"} & set(entry.architecture.input_modalities))
    return msgspec.structs.replace(listing, data=[entry], models=[ollama_entry(entry.id, multimodal)])
