"""Ollama's chat and generate requests as the worker's OpenAI-style bodies, and its answers back.

Pure: bodies and chunks in, bodies and lines out. Durations are Ollama's nanoseconds, from the
worker's llama-server ``timings`` (milliseconds) and the router's own clock (the wait for the
model, which includes its load, and the whole request).
"""

from __future__ import annotations

import json
from typing import Any

from msgspec import UnsetType

import service.api.ollama._schemas as o
from service.api.ollama._upstream import (
    Answer,
    Choice,
    ImagePart,
    OpenAIMessage,
    OpenAIToolCall,
    Timings,
    ToolCallDelta,
    Usage,
    WorkerBody,
)
from service.core.ollama import InvalidRequest, response_format, sampling

_DONE_REASONS = {"stop": "stop", "length": "length", "tool_calls": "stop", "function_call": "stop"}


def _image_part(image: str) -> ImagePart:
    url = image if image.startswith("data:") else f"data:image/png;base64,{image}"
    return {"type": "image_url", "image_url": {"url": url}}


def _tool_call_out(i: int, call: o.HistoryCall) -> OpenAIToolCall:
    """An Ollama tool call of the history (arguments an object) as OpenAI's (arguments a JSON string)."""
    found = call.get("function")
    function: o.HistoryCall = found if isinstance(found, dict) else {}
    arguments = function.get("arguments", {})
    return {
        "id": f"call_{i}",
        "type": "function",
        "function": {
            "name": str(function.get("name", "")),
            "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments),
        },
    }


def openai_message(message: o.Message) -> OpenAIMessage:
    """One Ollama message in OpenAI's shape: images as ``image_url`` parts, tool calls with string
    arguments, a tool result's ``tool_name`` as ``name``."""
    out: OpenAIMessage = {"role": message.role, "content": message.content}
    if message.images:
        out["content"] = [{"type": "text", "text": message.content}, *map(_image_part, message.images)]
    if message.tool_calls:
        out["tool_calls"] = [_tool_call_out(i, c) for i, c in enumerate(message.tool_calls)]
    if message.tool_name:
        out["name"] = message.tool_name
    return out


def _common(options: o.Options, n_ctx: int | None, stream: bool) -> WorkerBody:
    body: WorkerBody = {"stream": stream, **sampling(options or {}, n_ctx)}
    if stream:
        body["stream_options"] = {"include_usage": True}
    return body


def chat_body(data: o.ChatBody, model: str, n_ctx: int | None) -> WorkerBody:
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


def _json_schema(fmt: dict[str, object]) -> object:
    """llama-server's ``json_schema`` member for a ``response_format``: its schema, or any object for ``json``."""
    schema = fmt.get("json_schema")
    return schema["schema"] if isinstance(schema, dict) else {"type": "object"}


def _fill_in_the_middle(data: o.GenerateBody, body: WorkerBody, fmt: dict[str, object] | None) -> WorkerBody:
    body.pop("stream_options", None)  # llama-server's native stream puts timings on its last event anyway
    body.update(input_prefix=data.prompt, input_suffix=data.suffix, prompt="")
    if fmt is not None:
        body["json_schema"] = _json_schema(fmt)
    return body


def generate_body(data: o.GenerateBody, model: str, n_ctx: int | None) -> WorkerBody:
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
            body["json_schema"] = _json_schema(fmt)
        return body
    turn = o.Message(role="user", content=data.prompt, images=data.images)
    system = [o.Message(role="system", content=data.system)] if data.system else []
    body["messages"] = [openai_message(m) for m in (*system, turn)]
    if fmt is not None:
        body["response_format"] = fmt
    return body


def tool_calls_in(calls: list[ToolCallDelta]) -> list[o.ToolCall]:
    """OpenAI tool calls (arguments a JSON string) as Ollama's (arguments an object)."""
    out = []
    for call in calls:
        function = call.function
        raw = (function.arguments if function else None) or "{}"
        try:
            arguments = json.loads(raw)
        except ValueError:
            arguments = {"arguments": raw}  # a model that wrote broken JSON: keep what it said
        name = (function.name if function else None) or ""
        out.append(o.ToolCall(function=o.CalledFunction(name=name, arguments=arguments)))
    return out


def counters(timings: Timings | None, usage: Usage | None, load_ns: int, total_ns: int) -> dict[str, int]:
    """The final line's counters and durations (ns): llama-server's timings, else OpenAI's usage."""
    timings = timings or Timings()
    usage = usage or Usage()
    prompt_n = usage.prompt_tokens if isinstance(timings.prompt_n, UnsetType) else timings.prompt_n
    predicted_n = usage.completion_tokens if isinstance(timings.predicted_n, UnsetType) else timings.predicted_n
    return {
        "total_duration": total_ns,
        "load_duration": load_ns,
        "prompt_eval_count": int(prompt_n or 0),
        "prompt_eval_duration": int(timings.prompt_ms * 1e6),
        "eval_count": int(predicted_n or 0),
        "eval_duration": int(timings.predicted_ms * 1e6),
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


def choices_of(answer: Answer) -> list[Choice]:
    """An answer's choices: OpenAI's ``choices``, or llama-server's native answer (``/infill``:
    ``content``, ``stop``, ``stop_type``) as one completion choice."""
    if not isinstance(answer.choices, UnsetType):
        return list(answer.choices or [])
    if isinstance(answer.content, UnsetType):
        return []
    finish = ("length" if answer.stop_type == "limit" else "stop") if answer.stop else None
    return [Choice(text=answer.content or "", finish_reason=finish)]


def choice_text(choice: Choice) -> str:
    """The text of a chat or completion choice, whole or a stream's delta."""
    if not isinstance(choice.text, UnsetType):
        return choice.text or ""
    part = choice.delta or choice.message
    return (part.content if part else None) or ""
