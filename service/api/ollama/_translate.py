"""Ollama's chat and generate requests as the worker's OpenAI-style bodies, and its answers back.

Pure: bodies and chunks in, bodies and lines out. Durations are Ollama's nanoseconds, from the
worker's llama-server ``timings`` (milliseconds) and the router's own clock (the wait for the
model, which includes its load, and the whole request).
"""

from __future__ import annotations

import json
from typing import Any

import service.api.ollama._schemas as o
from service.core.ollama import InvalidRequest, response_format, sampling

_DONE_REASONS = {"stop": "stop", "length": "length", "tool_calls": "stop", "function_call": "stop"}


def _image_part(image: str) -> dict[str, Any]:
    url = image if image.startswith("data:") else f"data:image/png;base64,{image}"
    return {"type": "image_url", "image_url": {"url": url}}


def _tool_call_out(i: int, call: dict[str, Any]) -> dict[str, Any]:
    """An Ollama tool call of the history (arguments an object) as OpenAI's (arguments a JSON string)."""
    found = call.get("function")
    function: dict[str, Any] = found if isinstance(found, dict) else {}
    arguments = function.get("arguments", {})
    return {
        "id": f"call_{i}",
        "type": "function",
        "function": {
            "name": str(function.get("name", "")),
            "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments),
        },
    }


def openai_message(message: o.Message) -> dict[str, Any]:
    """One Ollama message in OpenAI's shape: images as ``image_url`` parts, tool calls with string
    arguments, a tool result's ``tool_name`` as ``name``."""
    out: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.images:
        out["content"] = [{"type": "text", "text": message.content}, *map(_image_part, message.images)]
    if message.tool_calls:
        out["tool_calls"] = [_tool_call_out(i, c) for i, c in enumerate(message.tool_calls)]
    if message.tool_name:
        out["name"] = message.tool_name
    return out


def _common(options: dict[str, Any] | None, n_ctx: int | None, stream: bool) -> dict[str, Any]:
    body: dict[str, Any] = {"stream": stream, **sampling(options or {}, n_ctx)}
    if stream:
        body["stream_options"] = {"include_usage": True}
    return body


def chat_body(data: o.ChatBody, model: str, n_ctx: int | None) -> dict[str, Any]:
    """``/v1/chat/completions`` for ``/api/chat``."""
    body = {"model": model, **_common(data.options, n_ctx, data.stream)}
    body["messages"] = [openai_message(m) for m in data.messages]
    if data.tools:
        body["tools"] = data.tools
    fmt = response_format(data.format)
    if fmt is not None:
        body["response_format"] = fmt
    return body


def generate_path(data: o.GenerateBody) -> str:
    """A ``suffix`` is fill-in-the-middle (llama-server's ``/infill``, with the model's FIM tokens;
    a model without them is the worker's 400, as Ollama refuses "insert" for it); a ``raw``
    prompt skips the chat template."""
    if data.suffix:
        return "/infill"
    return "/v1/completions" if data.raw else "/v1/chat/completions"


def _fill_in_the_middle(data: o.GenerateBody, body: dict[str, Any], fmt: dict[str, Any] | None) -> dict[str, Any]:
    body.pop("stream_options", None)  # llama-server's native stream puts timings on its last event anyway
    body.update(input_prefix=data.prompt, input_suffix=data.suffix, prompt="")
    if fmt is not None:
        schema = fmt.get("json_schema")
        body["json_schema"] = schema["schema"] if isinstance(schema, dict) else {"type": "object"}
    return body


def generate_body(data: o.GenerateBody, model: str, n_ctx: int | None) -> dict[str, Any]:
    """The worker's body for ``/api/generate``: the prompt as the user's turn (``system`` before
    it) through the chat template, as Ollama's template does, or the prompt as it is when raw."""
    body = {"model": model, **_common(data.options, n_ctx, data.stream)}
    fmt = response_format(data.format)
    path = generate_path(data)
    if path != "/v1/chat/completions" and data.images:
        raise InvalidRequest("images need the chat template: drop raw and suffix")
    if path == "/infill":
        return _fill_in_the_middle(data, body, fmt)
    if path == "/v1/completions":
        body["prompt"] = data.prompt
        if fmt is not None:
            schema = fmt.get("json_schema")
            body["json_schema"] = schema["schema"] if isinstance(schema, dict) else {"type": "object"}
        return body
    turn = o.Message(role="user", content=data.prompt, images=data.images)
    system = [o.Message(role="system", content=data.system)] if data.system else []
    body["messages"] = [openai_message(m) for m in (*system, turn)]
    if fmt is not None:
        body["response_format"] = fmt
    return body


def tool_calls_in(calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI tool calls (arguments a JSON string) as Ollama's (arguments an object)."""
    out = []
    for call in calls:
        function = call.get("function") or {}
        raw = function.get("arguments") or "{}"
        try:
            arguments = json.loads(raw) if isinstance(raw, str) else raw
        except ValueError:
            arguments = {"arguments": raw}  # a model that wrote broken JSON: keep what it said
        out.append({"function": {"name": function.get("name", ""), "arguments": arguments}})
    return out


def counters(timings: dict[str, Any], usage: dict[str, Any], load_ns: int, total_ns: int) -> dict[str, int]:
    """The final line's counters and durations (ns)."""
    prompt_n = int(timings.get("prompt_n", usage.get("prompt_tokens", 0)) or 0)
    predicted_n = int(timings.get("predicted_n", usage.get("completion_tokens", 0)) or 0)
    return {
        "total_duration": total_ns,
        "load_duration": load_ns,
        "prompt_eval_count": prompt_n,
        "prompt_eval_duration": int(float(timings.get("prompt_ms", 0.0)) * 1e6),
        "eval_count": predicted_n,
        "eval_duration": int(float(timings.get("predicted_ms", 0.0)) * 1e6),
    }


def done_reason(finish: str | None) -> str:
    """Ollama's ``done_reason`` for OpenAI's ``finish_reason``."""
    return _DONE_REASONS.get(finish or "stop", "stop")


def chat_line(model: str, created_at: str, content: str, done: bool, **extra: Any) -> o.ChatChunk:
    """One ``/api/chat`` line."""
    calls = extra.pop("tool_calls", None)
    message = o.ChatMessageOut(role="assistant", content=content, tool_calls=calls or None)
    return o.ChatChunk(model=model, created_at=created_at, message=message, done=done, **extra)


def generate_line(model: str, created_at: str, text: str, done: bool, **extra: Any) -> o.GenerateChunk:
    """One ``/api/generate`` line."""
    extra.pop("tool_calls", None)
    return o.GenerateChunk(model=model, created_at=created_at, response=text, done=done, **extra)


def choices_of(chunk: dict[str, Any]) -> list[dict[str, Any]]:
    """An answer's choices: OpenAI's ``choices``, or llama-server's native answer (``/infill``:
    ``content``, ``stop``, ``stop_type``) as one completion choice."""
    if "choices" in chunk:
        return list(chunk.get("choices") or [])
    if "content" not in chunk:
        return []
    finish = ("length" if chunk.get("stop_type") == "limit" else "stop") if chunk.get("stop") else None
    return [{"text": chunk.get("content") or "", "finish_reason": finish}]


def choice_text(choice: dict[str, Any]) -> str:
    """The text of a chat or completion choice, whole or a stream's delta."""
    if "text" in choice:
        return str(choice.get("text") or "")
    part = choice.get("delta") or choice.get("message") or {}
    return str(part.get("content") or "")
