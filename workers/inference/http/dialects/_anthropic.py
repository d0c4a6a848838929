"""Anthropic's Messages API (``POST /v1/messages``, ``/v1/messages/count_tokens``) over the chat path.

As llama-server does it (``tools/server/server-chat.cpp``
``server_chat_convert_anthropic_to_oai``, ``server-task.cpp`` ``to_json_anthropic*``):
the request becomes an OpenAI chat request (``system`` as the first message,
text/image/``tool_use``/``tool_result``/``thinking`` blocks as message parts,
tool calls and tool messages, ``input_schema`` as a tool's parameters,
``tool_choice`` ``any``/``tool`` as ``required``, ``stop_sequences`` as
``stop``, ``max_tokens`` 4096 when absent), runs as a chat, and the message
read from the output becomes Anthropic's: ``thinking``, ``text`` and
``tool_use`` content blocks, ``stop_reason`` ``end_turn``/``tool_use``/
``max_tokens``. Streams send Anthropic's events (``message_start``,
``content_block_start``/``_delta``/``_stop``, ``message_delta``,
``message_stop``) as ``event:`` + ``data:`` pairs, blocks one after another
in index order (what the SDK's accumulator needs).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any, NotRequired, TypedDict

from workers.inference.http._errors import ApiError
from workers.inference.http._json import JsonObject
from workers.inference.http.chat import ChatMessage, ChatRun, Delta
from workers.inference.http.dialects._sse import SseEvent

_PASSED = ("temperature", "top_p", "top_k", "stream", "chat_template_kwargs")


def _image_part(source: Any) -> JsonObject | None:
    if not isinstance(source, dict):
        return None
    if source.get("type") == "base64":
        url = f"data:{source.get('media_type', 'image/jpeg')};base64,{source.get('data', '')}"
        return {"type": "image_url", "image_url": {"url": url}}
    if source.get("type") == "url":
        return {"type": "image_url", "image_url": {"url": source.get("url", "")}}
    return None


def _tool_result(block: JsonObject) -> JsonObject:
    content = block.get("content")
    if isinstance(content, list):
        blocks = [c for c in content if isinstance(c, dict)]
        parts = [p for c in blocks if (p := _image_part(c.get("source")) if c.get("type") == "image" else c)]
        if all(p.get("type") == "text" for p in parts):
            content = "".join(str(p.get("text", "")) for p in parts)
        else:
            content = parts
    elif not isinstance(content, str):
        content = ""
    return {"role": "tool", "tool_call_id": str(block.get("tool_use_id", "")), "content": content}


def _message(msg: JsonObject) -> list[JsonObject]:
    """One Anthropic message -> OpenAI messages (its tool results become tool messages after it)."""
    content = msg.get("content")
    if not isinstance(content, list):
        return [msg]
    parts: list[JsonObject] = []
    calls: list[JsonObject] = []
    results: list[JsonObject] = []
    reasoning = ""
    for block in content:
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            parts.append({"type": "text", "text": block.get("text", "")})
        elif kind == "thinking":
            reasoning += str(block.get("thinking", ""))
        elif kind == "image" and (image := _image_part(block.get("source"))) is not None:
            parts.append(image)
        elif kind == "tool_use":
            args = json.dumps(block.get("input") or {}, ensure_ascii=False)
            fn = {"name": str(block.get("name", "")), "arguments": args}
            calls.append({"id": str(block.get("id", "")), "type": "function", "function": fn})
        elif kind == "tool_result":
            results.append(_tool_result(block))
        else:
            raise ApiError(400, f"unsupported content block type {kind!r}")
    out: list[JsonObject] = []
    if parts or calls or reasoning:
        new: JsonObject = {"role": msg.get("role"), "content": parts or ""}
        if calls:
            new["tool_calls"] = calls
        if reasoning:
            new["reasoning_content"] = reasoning
        out.append(new)
    return out + results


def _system(system: Any) -> str:
    if isinstance(system, str):
        return system
    if isinstance(system, list):
        return "".join(str(b.get("text", "")) for b in system if isinstance(b, dict) and b.get("type") == "text")
    raise ApiError(400, "'system' must be a string or a list of text blocks")


def to_chat(body: JsonObject) -> JsonObject:
    """An Anthropic request as an OpenAI chat request (see the module docstring)."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise ApiError(400, "'messages' is required and must be a list")
    out: list[JsonObject] = []
    if body.get("system") is not None:
        out.append({"role": "system", "content": _system(body["system"])})
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict):
            raise ApiError(400, f"messages[{i}] must be an object")
        if "content" not in msg and msg.get("role") == "assistant":
            continue
        out += _message(msg)
    chat: JsonObject = {"messages": out, "max_tokens": body.get("max_tokens", 4096)}
    tools = body.get("tools")
    if isinstance(tools, list):
        fns = [
            {
                "name": t.get("name", ""),
                "description": t.get("description", ""),
                "parameters": t.get("input_schema") or {},
            }
            for t in tools
            if isinstance(t, dict)
        ]
        chat["tools"] = [{"type": "function", "function": fn} for fn in fns]
    choice = body.get("tool_choice")
    if isinstance(choice, dict):
        kind = choice.get("type")
        if kind == "tool" and isinstance(choice.get("name"), str):
            chat["tool_choice"] = {"type": "function", "function": {"name": choice["name"]}}
        elif kind in ("auto", "any", "none"):
            chat["tool_choice"] = {"auto": "auto", "any": "required", "none": "none"}[kind]
    if body.get("stop_sequences") is not None:
        chat["stop"] = body["stop_sequences"]
    chat.update({key: body[key] for key in _PASSED if key in body})
    return chat


class Usage(TypedDict):
    cache_read_input_tokens: NotRequired[int]
    input_tokens: NotRequired[int]
    output_tokens: int


class Block(TypedDict):
    """A content block: ``thinking`` (with its ``signature``), ``text`` or ``tool_use``."""

    type: str
    thinking: NotRequired[str]
    signature: NotRequired[str]
    text: NotRequired[str]
    id: NotRequired[str]
    name: NotRequired[str]
    input: NotRequired[object]  # the call's arguments, parsed from the JSON the model wrote


class Message(TypedDict):
    """Anthropic's ``message`` (``to_json_anthropic``)."""

    id: str
    type: str
    role: str
    content: list[Block]
    model: str
    stop_reason: str | None
    stop_sequence: str | None
    usage: Usage


def _stop_reason(run: ChatRun) -> str:
    if run.finish_reason == "length":
        return "max_tokens"
    return "tool_use" if run.message.tool_calls else "end_turn"


def _usage(run: ChatRun) -> Usage:
    return {
        "cache_read_input_tokens": run.n_cached,
        "input_tokens": run.n_prompt - run.n_cached,
        "output_tokens": run.n_predicted,
    }


def _tool_input(arguments: str) -> object:
    try:
        return json.loads(arguments)
    except json.JSONDecodeError:
        return {}


def _blocks(msg: ChatMessage) -> list[Block]:
    blocks: list[Block] = []
    if msg.reasoning_content:
        blocks.append({"type": "thinking", "thinking": msg.reasoning_content, "signature": ""})
    if msg.content:
        blocks.append({"type": "text", "text": msg.content})
    for call in msg.tool_calls:
        blocks.append({"type": "tool_use", "id": call.id, "name": call.name, "input": _tool_input(call.arguments)})
    return blocks


class AnthropicMessage:
    """Shapes one chat run as Anthropic's message, or its stream of events."""

    def __init__(self, run: ChatRun, model: str) -> None:
        self.run, self.model = run, model
        self.id = f"msg_{uuid.uuid4().hex[:24]}"

    def _head(self, content: list[Block], stop_reason: str | None) -> Message:
        word = self.run.stopping_word if stop_reason else ""
        return {
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "content": content,
            "model": self.model,
            "stop_reason": stop_reason,
            "stop_sequence": word or None,
            "usage": _usage(self.run),
        }

    def whole(self) -> Message:
        msg = self.run.run()
        return self._head(_blocks(msg), _stop_reason(self.run))

    def events(self) -> Iterator[SseEvent]:
        head = self._head([], None)
        head["usage"] = {**head["usage"], "output_tokens": 0}
        yield SseEvent("message_start", {"type": "message_start", "message": head})
        blocks = _Blocks()
        for deltas, _ in self.run.deltas():
            for d in deltas:
                yield from blocks.feed(d)
        yield from blocks.close()
        word = self.run.stopping_word
        delta = {"stop_reason": _stop_reason(self.run), "stop_sequence": word or None}
        usage = {"output_tokens": self.run.n_predicted}
        yield SseEvent("message_delta", {"type": "message_delta", "delta": delta, "usage": usage})
        yield SseEvent("message_stop", {"type": "message_stop"})


class _Blocks:
    """The open content block of a stream: one at a time, in index order."""

    def __init__(self) -> None:
        self.index = -1
        self.kind: tuple[str, int] | None = None  # ("thinking"|"text"|"tool_use", tool index)

    def _start(self, kind: tuple[str, int], block: Block) -> Iterator[SseEvent]:
        yield from self.close()
        self.index += 1
        self.kind = kind
        yield SseEvent(
            "content_block_start", {"type": "content_block_start", "index": self.index, "content_block": block}
        )

    def _delta(self, delta: dict[str, str]) -> SseEvent:
        return SseEvent("content_block_delta", {"type": "content_block_delta", "index": self.index, "delta": delta})

    def feed(self, d: Delta) -> Iterator[SseEvent]:
        if d.reasoning_content:
            if self.kind != ("thinking", -1):
                yield from self._start(("thinking", -1), {"type": "thinking", "thinking": ""})
            yield self._delta({"type": "thinking_delta", "thinking": d.reasoning_content})
        if d.content:
            if self.kind != ("text", -1):
                yield from self._start(("text", -1), {"type": "text", "text": ""})
            yield self._delta({"type": "text_delta", "text": d.content})
        if d.tool_index >= 0:
            if self.kind != ("tool_use", d.tool_index):
                block: Block = {"type": "tool_use", "id": d.tool_id, "name": d.tool_name, "input": {}}
                yield from self._start(("tool_use", d.tool_index), block)
            if d.tool_arguments:
                yield self._delta({"type": "input_json_delta", "partial_json": d.tool_arguments})

    def close(self) -> Iterator[SseEvent]:
        if self.kind is None:
            return
        if self.kind[0] == "thinking":  # Anthropic's API signs a thinking block before it ends
            yield self._delta({"type": "signature_delta", "signature": ""})
        yield SseEvent("content_block_stop", {"type": "content_block_stop", "index": self.index})
        self.kind = None
