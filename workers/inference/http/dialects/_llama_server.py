"""llama-server's own endpoints on the batch engine: ``/tokenize``, ``/detokenize``,
``/apply-template`` and ``GET /props`` (the native ``/completion`` shapes: :mod:`._native_completion`).

Request and response shapes are llama-server's (``tools/server/server-context.cpp``
of the llama.cpp that llama-cpp-python vendors), so that a client written for
llama-server works unchanged through the router:

* ``POST /tokenize`` ``{content, add_special=false, parse_special=true, with_pieces=false}``
  → ``{"tokens": [ids]}``, or ``[{"id", "piece"}]`` with pieces (a piece that is
  not valid UTF-8 is a list of byte values). ``content`` may mix strings and
  token ids, as llama-server's ``tokenize_mixed`` allows.
* ``POST /detokenize`` ``{tokens}`` → ``{"content"}``.
* ``POST /apply-template`` ``{messages}`` → ``{"prompt"}``: the chat as the model's
  chat handler renders it before tokenizing (the same text a chat request evaluates).
* ``GET /props`` → the model's properties (``default_generation_settings``,
  ``total_slots``, ``model_path``, ``chat_template``, ``modalities``, ...).

Everything runs on the HTTP thread: the vocabulary is read-only after load.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

from workers.inference.engine import SamplingParams
from workers.inference.http._errors import ApiError
from workers.inference.http._json import JsonObject, is_number, is_token, json_object
from workers.inference.http._options import FrontOptions
from workers.inference.http.chat import template_caps
from workers.inference.http.dialects._requests import normalize_message
from workers.inference.http.dialects._server_defaults import shown
from workers.inference.llama import MEDIA_MARKER


@functools.cache
def build_info() -> str:
    """``b0-modelrouter-llama-cpp-python-X`` (first ``/props`` only: importlib.metadata costs
    tens of milliseconds, not to be paid on the way to ready)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"b0-modelrouter-llama-cpp-python-{version('llama-cpp-python')}"
    except PackageNotFoundError:
        return "b0-modelrouter"


def _flag(body: JsonObject, key: str, default: bool) -> bool:
    v = body.get(key)
    if v is None:
        return default
    if not isinstance(v, bool):
        raise ApiError(400, f"'{key}' must be a boolean")
    return v


def _check_ids(tokens: list[int], n_vocab: int) -> None:
    if any(not 0 <= t < n_vocab for t in tokens):
        raise ApiError(400, f"token ids must be in [0, {n_vocab})")


def _piece(llm: Any, token: int) -> bytes:
    """``common_token_to_piece``: special tokens rendered as their text."""
    import ctypes

    buf = ctypes.create_string_buffer(256)
    n = llm.lc.llama_token_to_piece(llm.vocab, token, buf, len(buf), 0, True)
    if n < 0:
        buf = ctypes.create_string_buffer(-n)
        n = llm.lc.llama_token_to_piece(llm.vocab, token, buf, len(buf), 0, True)
    return buf.raw[: max(n, 0)]


def tokenize(front: Any, body: JsonObject) -> JsonObject:
    """``POST /tokenize``."""
    llm = front.llm
    add_special = _flag(body, "add_special", False)
    parse_special = _flag(body, "parse_special", True)
    with_pieces = _flag(body, "with_pieces", False)
    content = body.get("content")
    if content is None:
        return {"tokens": []}
    parts = content if isinstance(content, list) else [content]
    if not all(isinstance(p, str) or is_token(p) for p in parts):
        raise ApiError(400, "'content' must be a string or a list of strings and token ids")
    tokens: list[int] = []
    for i, part in enumerate(parts):
        if isinstance(part, str):
            data = part.encode("utf-8")
            tokens += llm.tokenize_whole(data, add_special=add_special and i == 0, parse_special=parse_special)
        else:
            tokens.append(part)
    _check_ids(tokens, llm.n_vocab)
    if not with_pieces:
        return {"tokens": tokens}
    out: list[JsonObject] = []
    for t in tokens:
        raw = _piece(llm, t)
        try:
            piece: str | list[int] = raw.decode("utf-8")
        except UnicodeDecodeError:
            piece = list(raw)
        out.append({"id": t, "piece": piece})
    return {"tokens": out}


def detokenize(front: Any, body: JsonObject) -> JsonObject:
    """``POST /detokenize``."""
    tokens = body.get("tokens")
    if tokens is None:
        return {"content": ""}
    if not isinstance(tokens, list) or not all(is_token(t) for t in tokens):
        raise ApiError(400, "'tokens' must be a list of token ids")
    _check_ids(tokens, front.llm.n_vocab)
    return {"content": b"".join(_piece(front.llm, t) for t in tokens).decode("utf-8", errors="replace")}


_TEMPLATE_KEYS = (
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "chat_template_kwargs",
    "reasoning_effort",
    "add_generation_prompt",
    "continue_final_message",
)


def apply_template(front: Any, body: JsonObject) -> JsonObject:
    """``POST /apply-template``: the prompt a chat request with this body evaluates, without inference
    (the same :func:`~workers.inference.http.chat._session.chat_prompt`, tools and kwargs included)."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, "'messages' is required and must be a non-empty list")
    media: list[tuple[str, bytes]] | None = [] if getattr(front.llm, "projector", None) is not None else None
    last = len(messages) - 1
    kwargs: JsonObject = {
        "messages": [normalize_message(i, m, media, prefill=i == last) for i, m in enumerate(messages)]
    }
    kwargs.update({key: body[key] for key in _TEMPLATE_KEYS if body.get(key) is not None})
    return {"prompt": front.plan_chat(kwargs).rendered.prompt}


def generation_settings(
    params: JsonObject,
    *,
    n_predict: int = -1,
    stream: bool = False,
    n_keep: int = 0,
    ignore_eos: bool = False,
    logit_bias: Sequence[tuple[int, float]] = (),
    reasoning_format: str = "none",
    lora: Sequence[tuple[int, float]] = (),
    whole: bool = True,
    post_sampling_probs: bool = False,
    spec_types: str = "none",
) -> JsonObject:
    """``params`` (the sampler's, :meth:`SamplingParams.to_json`) with the rest of llama-server's
    ``task_params::to_json``: a request's ``generation_settings``, or with ``whole`` false the
    shorter form ``/props`` shows. Keys for what this worker does not have (lazy grammars, backend
    sampling) carry llama-server's values when it does not use them either."""
    out = {
        **params,
        "max_tokens": n_predict,
        "n_predict": n_predict,
        "n_keep": n_keep,
        "n_discard": 0,
        "ignore_eos": ignore_eos,
        "stream": stream,
        "min_keep": 0,
        "chat_format": "Content-only",
        "reasoning_format": reasoning_format,
        "reasoning_in_content": False,
        "generation_prompt": "",
        "speculative.types": spec_types,
        "timings_per_token": False,
        "post_sampling_probs": post_sampling_probs,
        "backend_sampling": False,
        "lora": [{"id": i, "scale": scale} for i, scale in lora],
    }
    if whole:  # -inf (ignore_eos) is null in JSON, as nlohmann writes it
        out["logit_bias"] = [{"bias": b if math.isfinite(b) else None, "token": t} for t, b in logit_bias]
        out.update(grammar_lazy=False, grammar_triggers=[], preserved_tokens=[])
    return out


def _modalities(llm: Any) -> dict[str, bool]:
    """What the projector takes (llama-server: ``mtmd_support_vision``/``_audio``, ``mtmd_helper_support_video``)."""
    projector = getattr(llm, "projector", None)
    if projector is None:
        return {"vision": False, "video": False, "audio": False}
    return {"vision": projector.vision, "video": projector.video, "audio": projector.audio}


def props(front: Any, total_slots: int, model_name: str, opts: FrontOptions) -> JsonObject:
    """``GET /props``: what llama-server's ``get_res_props`` reports, as far as it applies (the
    endpoint switches, ``--seed`` and the server's sampling defaults from ``opts``). llama-server
    shows a default ``task_params`` holding the command line's sampler settings, so the rest
    (``reasoning_format``, ``n_keep``) are that struct's defaults whatever the command line says."""
    llm = front.llm
    shown_defaults = shown(opts.sampling_defaults, opts.default_seed)
    params: JsonObject = {**json_object(SamplingParams().to_json()), "stop": [], **shown_defaults}
    n_predict = params.pop("n_predict", -1)  # the sampler's int, or a number from the service's defaults
    params = generation_settings(
        params,
        n_predict=int(n_predict) if is_number(n_predict) else -1,
        ignore_eos=params.get("ignore_eos") is True,  # --ignore-eos: a sampler setting in llama.cpp
        whole=False,
        spec_types=opts.spec_type,
    )
    source = getattr(front.renderer(), "source", "")
    return {
        "default_generation_settings": {"params": params, "n_ctx": llm.n_ctx},
        "total_slots": total_slots,
        "model_alias": model_name,
        "model_ftype": _ftype(llm),
        "model_path": llm.path,
        "modalities": _modalities(llm),
        "media_marker": MEDIA_MARKER,
        "endpoint_slots": opts.endpoint_slots,
        "endpoint_props": opts.endpoint_props,
        "endpoint_metrics": opts.endpoint_metrics,
        "ui": False,  # llama.cpp's web UI is not served (the service serves its own dashboard)
        "ui_settings": {},
        "chat_template": source,
        "chat_template_caps": template_caps(source),
        "bos_token": llm.token_text(llm.bos) if llm.bos >= 0 else "",
        "eos_token": llm.token_text(llm.eos) if llm.eos >= 0 else "",
        "build_info": build_info(),
        "is_sleeping": False,
        "cors_proxy_enabled": False,  # /cors-proxy answers llama-server's 403 either way (docs/llama-cpp-compat.md)
    }


def model_info(llm: Any) -> JsonObject:
    """llama-server's ``meta`` of a ``/v1/models`` entry (``get_res_model_info``); empty for a model
    that is not one of ours (the legacy engine's ``llama_cpp.Llama``)."""
    lc, model = getattr(llm, "lc", None), getattr(llm, "model", None)
    if lc is None or model is None:
        return {}
    return {
        "vocab_type": int(lc.llama_vocab_type(llm.vocab)),
        "n_vocab": llm.n_vocab,
        "n_ctx": llm.n_ctx,
        "n_ctx_train": int(lc.llama_model_n_ctx_train(model)),
        "n_embd": int(lc.llama_model_n_embd_inp(model)),
        "n_params": int(lc.llama_model_n_params(model)),
        "size": int(lc.llama_model_size(model)),
        "ftype": _ftype(llm),
    }


def _ftype(llm: Any) -> str:
    """The file's type as llama.cpp names it (``llama_ftype_name``: ``Q4_K - Medium``, ``F16``...)."""
    name = llm.lc.llama_ftype_name(llm.lc.llama_model_ftype(llm.model))
    return name.decode("utf-8", "replace") if isinstance(name, bytes) else str(name)


# -- /completion (llama-server's native shape) ---------------------------------------
