"""OpenAI request validation and mapping onto ``llama_cpp.Llama`` calls.

Why a separate, pure module: the HTTP layer must answer bad input with a
clear 400 *before* a request takes the single inference slot, and never pass
arbitrary client keys into llama-cpp-python (unknown kwargs raise
``TypeError`` deep inside, which would look like a server bug).

Every refusal is a :class:`workers.inference.http._errors.ApiError` (400 unless said otherwise).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, TypedDict, cast

from workers.inference.http._errors import ApiError
from workers.inference.http._json import Json, JsonObject, LlamaKwargs, is_number, is_strings, is_token
from workers.inference.http._schema_grammar import schema_to_gbnf
from workers.inference.http.chat import MEDIA_PARTS, Media, MediaInput, load_media, part_url
from workers.inference.http.dialects._llama_sampling import llama_constraint, llama_sampling
from workers.inference.http.dialects._prompts import prompt_args, split_prompts
from workers.inference.llama import MEDIA_MARKER

if TYPE_CHECKING:
    from llama_cpp.llama_grammar import LlamaGrammar


class RequestOptions(TypedDict, total=False):
    """What a request asks beyond ``Llama``'s signature (:func:`request_options`), and ``native``:
    llama-server's own ``/completion`` shape."""

    cache_prompt: bool
    ignore_eos: bool
    lora: list[Json]  # the request's adapter set, checked against the adapters by the front
    n_cmpl: int
    n_cache_reuse: int
    id_slot: int
    n_keep: int
    include_usage: bool
    native: bool
    verbose: bool  # OpenAI chats and completions: __verbose (dialects._verbose)
    response_fields: list[str]  # native only: the paths its final answer keeps
    return_progress: bool  # llama-server's prompt_progress chunks (streams only)
    timings_per_token: bool  # llama-server's timings on every chunk
    return_tokens: bool  # llama-server's: the whole answer carries the reply's token ids


_FLOAT_PARAMS = (
    "temperature",
    "top_p",
    "min_p",
    "typical_p",
    "presence_penalty",
    "frequency_penalty",
    "repeat_penalty",
    "tfs_z",
    "mirostat_tau",
    "mirostat_eta",
)
_INT_PARAMS = ("top_k", "seed", "mirostat_mode")
_ROLES = {"system", "user", "assistant", "tool", "function", "developer"}


def parse_json_object(raw: bytes) -> JsonObject:
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ApiError(400, f"request body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise ApiError(400, "request body must be a JSON object")
    return body


def _sampling_kwargs(body: JsonObject) -> LlamaKwargs:
    """Validated sampling parameters common to chat and completions."""
    out: LlamaKwargs = {}
    for key in _FLOAT_PARAMS:
        value = body.get(key)
        if value is not None:
            if not is_number(value):
                raise ApiError(400, f"'{key}' must be a number")
            out[key] = float(value)
    if body.get("mirostat") is not None and body.get("mirostat_mode") is None:  # llama-server's name
        body = {**body, "mirostat_mode": body["mirostat"]}
    for key in _INT_PARAMS:
        if body.get(key) is not None:
            if not isinstance(body[key], int) or isinstance(body[key], bool):
                raise ApiError(400, f"'{key}' must be an integer")
            out[key] = body[key]
    llama = llama_sampling(body)
    if llama:
        out["llama_sampling"] = llama
    max_tokens = body.get("max_tokens", body.get("max_completion_tokens"))
    if max_tokens is not None:
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 0:
            raise ApiError(400, "'max_tokens' must be a non-negative integer")
        out["max_tokens"] = max_tokens
    stop = body.get("stop")
    if stop is not None:
        if isinstance(stop, str):
            stop = [stop]
        if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
            raise ApiError(400, "'stop' must be a string or a list of strings")
        out["stop"] = stop
    bias = body.get("logit_bias")
    if bias is not None:
        out["logit_bias"] = logit_bias(bias)
    return out


def _bias_value(v: Json) -> float:
    if v is False:
        return float("-inf")  # llama-server: false bans the token
    if not is_number(v):
        raise ApiError(400, "'logit_bias' values must be numbers or false")
    return float(v)


def _bias_key(k: Json) -> int | str:
    if isinstance(k, str):
        return int(k) if k.strip().lstrip("-").isdigit() else k  # a token id, else text to tokenize
    if isinstance(k, int) and not isinstance(k, bool):
        return k
    raise ApiError(400, "'logit_bias' keys must be token ids or strings")


def logit_bias(bias: Json) -> list[tuple[int | str, float]]:
    """llama-server's forms: ``{"id or text": bias}`` or ``[[id or text, bias], ...]`` (``false``:
    never sample it); text is tokenized by the front and each of its tokens biased."""
    if isinstance(bias, dict):
        return [(_bias_key(k), _bias_value(v)) for k, v in bias.items()]
    if isinstance(bias, list) and all(isinstance(p, list) and len(p) == 2 for p in bias):
        return [(_bias_key(p[0]), _bias_value(p[1])) for p in bias if isinstance(p, list)]  # all are pairs
    raise ApiError(400, "'logit_bias' must be an object or a list of [token, bias] pairs")


def _stream_flag(body: JsonObject) -> bool:
    stream = body.get("stream", False)
    if stream is None:
        return False
    if not isinstance(stream, bool):
        raise ApiError(400, "'stream' must be a boolean")
    return stream


def _media_content(i: int, content: list[Json], media: Media) -> str:
    """Parts with media as one string, as llama-server joins them: each media part becomes the
    marker (its file goes to ``media``), text parts are joined by newlines but none is put next
    to a marker (``common_chat_msg::to_json_oaicompat``)."""
    text, after_marker = "", False
    for part in content:
        fields = part if isinstance(part, dict) else {}
        kind, piece = fields.get("type"), fields.get("text")
        if kind in MEDIA_PARTS:
            media.append((MEDIA_PARTS[str(kind)], load_media(part_url(fields))))
            text, after_marker = text + MEDIA_MARKER, True
        elif kind == "text" and isinstance(piece, str):
            text += ("\n" if text and not after_marker else "") + piece
            after_marker = False
        else:
            raise ApiError(400, f"messages[{i}].content: unsupported content[].type")
    return text


def normalize_message(i: int, msg: Json, media: Media | None = None, *, prefill: bool = False) -> JsonObject:
    """One chat message, validated; media parts need ``media`` (a model with a projector: their files
    are appended to it and the content carries markers), else they are refused (:class:`MediaInput`).
    ``prefill``: the chat's last message, whose text parts, if it is the assistant's, are joined by a
    blank line, as llama-server writes the message it continues (``render_content``)."""
    if not isinstance(msg, dict):
        raise ApiError(400, f"messages[{i}] must be an object")
    role = msg.get("role")
    if not isinstance(role, str) or role not in _ROLES:  # a dict role is unhashable: check the type first
        raise ApiError(400, f"messages[{i}].role must be one of {sorted(_ROLES)}")
    if "content" not in msg and role != "assistant":
        raise ApiError(400, f"messages[{i}].content is required for role {role!r}")
    out = dict(msg)
    if role == "developer":  # OpenAI's newer name; chat templates know "system"
        out["role"] = "system"
    content = msg.get("content")
    if content is None and role == "assistant":
        out["content"] = ""  # chat formatters index "content" and join strings
    if (
        isinstance(content, list)
        and media is not None
        and any(isinstance(p, dict) and p.get("type") in MEDIA_PARTS for p in content)
    ):
        out["content"] = _media_content(i, content, media)
    elif isinstance(content, list):
        # Multi-part content: text parts are joined; media parts need a projector (see MediaInput).
        texts = []
        for part in content:
            if isinstance(part, dict) and part.get("type") in MEDIA_PARTS:
                raise MediaInput(MEDIA_PARTS[str(part["type"])])
            piece = part.get("text") if isinstance(part, dict) else None
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(piece, str):
                raise ApiError(400, f"messages[{i}].content: only text parts are supported")
            texts.append(piece)
        out["content"] = ("\n\n" if prefill and role == "assistant" else "").join(texts)
    elif content is not None and not isinstance(content, str):
        raise ApiError(400, f"messages[{i}].content must be a string, a list of parts or null")
    return out


def chat_request(
    body: JsonObject, model_name: str, *, media: bool = False, empty: bool = False
) -> tuple[LlamaKwargs, bool]:
    """kwargs for ``Llama.create_chat_completion`` and the stream flag; ``media``: the model takes
    media parts (its files go to ``kwargs["media"]``); ``empty``: no messages is a chat too (Anthropic's,
    which llama-server renders as the template's bare generation prompt)."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not (messages or empty):
        raise ApiError(400, "'messages' is required and must be a non-empty list")
    kwargs = _sampling_kwargs(body)
    files: Media | None = [] if media else None
    last = len(messages) - 1
    kwargs["messages"] = [normalize_message(i, m, files, prefill=i == last) for i, m in enumerate(messages)]
    if files:
        kwargs["media"] = files
    for key in (
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "chat_template_kwargs",
        "reasoning_format",
        "reasoning_effort",
        "add_generation_prompt",
        "continue_final_message",
    ):
        if body.get(key) is not None:
            kwargs[key] = body[key]
    if body.get("functions") is not None and "tools" not in kwargs:  # OpenAI's older names for the same
        functions = cast("list[Json]", body["functions"])  # iterated as given, as it always was
        kwargs["tools"] = [{"type": "function", "function": f} for f in functions]
        if isinstance(body.get("function_call"), (str, dict)):
            fc = body["function_call"]
            kwargs["tool_choice"] = fc if isinstance(fc, str) else {"type": "function", "function": fc}
    if body.get("reasoning_control") is not None:  # llama-server's: /v1/chat/completions/control may end it
        if not isinstance(body["reasoning_control"], bool):
            raise ApiError(400, "'reasoning_control' must be a boolean")
        kwargs["reasoning_control"] = body["reasoning_control"]
    if body.get("response_format") is not None:
        kwargs["response_format"] = _response_format(body["response_format"])
    elif body.get("grammar") is not None or body.get("json_schema") is not None:
        kwargs["response_format"] = llama_constraint(body)
    if body.get("logprobs") is not None:
        kwargs["logprobs"] = bool(body["logprobs"])
    if body.get("top_logprobs") is not None:
        if not kwargs.get("logprobs"):  # llama-server's (and OpenAI's) refusal
            raise ApiError(400, "top_logprobs requires logprobs to be set to true")
        kwargs["top_logprobs"] = body["top_logprobs"]
    stream = _stream_flag(body)
    kwargs["stream"] = stream
    kwargs["model"] = model_name
    return kwargs, stream


def _response_format(fmt: Json) -> JsonObject:
    """OpenAI's ``json_schema`` form folded into llama-cpp-python's ``json_object`` + ``schema``."""
    if not isinstance(fmt, dict) or fmt.get("type") not in ("text", "json_object", "json_schema"):
        raise ApiError(400, "'response_format.type' must be 'text', 'json_object' or 'json_schema'")
    if fmt["type"] != "json_schema":
        return fmt
    spec = fmt.get("json_schema")
    if not isinstance(spec, dict) or not isinstance(spec.get("schema", {}), dict):
        raise ApiError(400, "'response_format.json_schema' must be an object with a 'schema' object")
    return {"type": "json_object", "schema": spec.get("schema", {})}


def _grammar(body: JsonObject) -> LlamaGrammar | None:
    """llama-server's ``grammar`` (GBNF) or ``json_schema`` on completions, as a ``LlamaGrammar``."""
    from llama_cpp.llama_grammar import LlamaGrammar  # light: no numpy

    if body.get("grammar") is not None:
        if not isinstance(body["grammar"], str):
            raise ApiError(400, "'grammar' must be a GBNF string")
        return LlamaGrammar.from_string(body["grammar"], verbose=False)
    schema = body.get("json_schema")
    if schema is None:
        return None
    if not isinstance(schema, dict):
        raise ApiError(400, "'json_schema' must be an object")
    try:
        return LlamaGrammar.from_string(schema_to_gbnf(schema), verbose=False)
    except Exception as exc:  # the converter raises plain exceptions on unsupported schemas
        raise ApiError(400, f"'json_schema' cannot be converted to a grammar: {exc}") from None


def completion_request(body: JsonObject, model_name: str, *, media: bool = False) -> tuple[LlamaKwargs, bool]:
    """kwargs for ``Llama.create_completion`` and the stream flag (``media``: as :func:`chat_request`).
    Several prompts (:func:`split_prompts`): the first's in the kwargs, every one's in ``prompts``."""
    prompts = [prompt_args(p, media) for p in split_prompts(body.get("prompt"))]
    kwargs = _sampling_kwargs(body)
    kwargs.update(prompts[0])
    if len(prompts) > 1:
        kwargs["prompts"] = prompts
    if body.get("suffix") is not None:
        kwargs["suffix"] = str(body["suffix"])
    grammar = _grammar(body)
    if grammar is not None:
        kwargs["grammar"] = grammar
    if body.get("echo") is not None:
        kwargs["echo"] = bool(body["echo"])
    if body.get("logprobs") is not None:
        if not isinstance(body["logprobs"], int) or isinstance(body["logprobs"], bool):
            raise ApiError(400, "'logprobs' must be an integer for completions")
        kwargs["logprobs"] = body["logprobs"]
    stream = _stream_flag(body)
    kwargs["stream"] = stream
    kwargs["model"] = model_name
    return kwargs, stream


def request_options(body: JsonObject) -> RequestOptions:
    """Options outside ``Llama``'s signature: ``cache_prompt`` (llama-server's, default true),
    ``ignore_eos`` (llama-server's: end-of-generation tokens are never sampled), ``id_slot``,
    ``lora``, ``n_cmpl``, ``n_keep``, ``n_cache_reuse`` (llama-server's) and ``stream_options.include_usage``
    (OpenAI's)."""
    opts: RequestOptions = {}
    for key in ("cache_prompt", "ignore_eos"):
        value = body.get(key)
        if value is not None:
            if not isinstance(value, bool):
                raise ApiError(400, f"'{key}' must be a boolean")
            opts[key] = value
    if body.get("return_progress") is True:  # as llama-server's json_value: anything else is the default
        opts["return_progress"] = True
    if body.get("timings_per_token") is True:
        opts["timings_per_token"] = True
    if body.get("return_tokens") is True:
        opts["return_tokens"] = True
    lora = body.get("lora")
    if lora is not None:  # its own adapter set (checked against the adapters by the front)
        if not isinstance(lora, list):
            raise ApiError(400, "Error: 'lora' must be an array of objects with 'id' and 'scale' fields")
        if lora:  # [] is the worker's own set, as in llama-server
            opts["lora"] = lora
    n_cmpl = body.get("n_cmpl", body.get("n"))  # llama-server: "n" is n_cmpl's OpenAI alias
    if n_cmpl is not None:
        if not is_token(n_cmpl) or n_cmpl < 1:
            raise ApiError(400, "'n_cmpl' (or 'n') must be an integer >= 1")
        opts["n_cmpl"] = n_cmpl
    n_cache_reuse = body.get("n_cache_reuse")
    if n_cache_reuse is not None:  # llama-server: 0 (off) to INT32_MAX
        if not is_token(n_cache_reuse) or n_cache_reuse < 0:
            raise ApiError(400, "'n_cache_reuse' must be an integer >= 0")
        opts["n_cache_reuse"] = n_cache_reuse
    id_slot = body.get("id_slot")
    if id_slot is not None:  # llama-server: a slot id (modulo the slots), -1 or below: any idle slot
        if not isinstance(id_slot, int) or isinstance(id_slot, bool):
            raise ApiError(400, "'id_slot' must be an integer")
        opts["id_slot"] = max(id_slot, -1)
    n_keep = body.get("n_keep")
    if n_keep is not None:
        if not is_token(n_keep) or n_keep < -1:
            raise ApiError(400, "'n_keep' must be an integer >= -1")
        opts["n_keep"] = n_keep
    stream_options = body.get("stream_options")
    if stream_options is not None:
        if not isinstance(stream_options, dict):
            raise ApiError(400, "'stream_options' must be an object")
        opts["include_usage"] = bool(stream_options.get("include_usage"))
    return opts


def embedding_request(body: JsonObject) -> tuple[list[str], str]:
    """The inputs (always a list) and the encoding format (``float``/``base64``)."""
    inp = body.get("input")
    if isinstance(inp, str):
        inp = [inp]
    if not is_strings(inp) or not inp:
        raise ApiError(400, "'input' is required: a string or a non-empty list of strings")
    fmt = body.get("encoding_format") or "float"
    if fmt not in ("float", "base64"):
        raise ApiError(400, "'encoding_format' must be 'float' or 'base64'")
    return inp, fmt
