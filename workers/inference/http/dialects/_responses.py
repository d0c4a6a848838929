"""OpenAI's Responses API (``POST /v1/responses``) over the chat path, as llama-server serves it.

The request (``server_chat_convert_responses_to_chatcmpl``): ``instructions``
become the system message; ``input`` is a string (one user message) or a list
of items -- input messages (``input_text``, ``input_image``), earlier output
messages (``output_text``), ``function_call`` and ``function_call_output``
items, ``reasoning`` items -- turned into chat messages; function ``tools``
keep their schema; ``max_output_tokens`` is ``max_tokens``. Like llama-server,
nothing is stored: ``previous_response_id`` is refused.

The answer (``to_json_oaicompat_resp*``): a ``response`` object whose
``output`` holds a ``reasoning`` item, a ``message`` with ``output_text``, and
one ``function_call`` item per tool call. A stream sends ``response.created``,
``response.in_progress``, each item's ``response.output_item.added``, the
deltas (``response.reasoning_text.delta``, ``response.output_text.delta``,
``response.function_call_arguments.delta``), the ``.done`` events, and
``response.completed`` with the whole response. Each event also carries
``sequence_number`` and its ``output_index``/``content_index`` (OpenAI's
fields, which the SDK's stream helper reads; llama-server leaves them out).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import NotRequired, TypedDict

from workers.inference.http._errors import ApiError
from workers.inference.http._json import Json, JsonObject, items
from workers.inference.http._record import CachedTokens
from workers.inference.http.chat import ChatMessage, ChatRun, Delta
from workers.inference.http.dialects._sse import SseEvent


def _input_parts(item: JsonObject) -> list[JsonObject]:
    parts: list[JsonObject] = []
    for part in items(item.get("content") or []):
        fields = part if isinstance(part, dict) else {}
        kind, text = fields.get("type"), fields.get("text")
        if kind in ("input_text", "output_text"):
            if not isinstance(text, str):
                raise ApiError(400, f"'{kind}' requires 'text'")
            parts.append({"type": "text", "text": text})
        elif kind == "input_image":
            if "image_url" not in fields:
                raise ApiError(400, "'image_url' is required")
            parts.append({"type": "image_url", "image_url": {"url": fields["image_url"]}})
        elif kind == "refusal":
            parts.append({"type": "text", "text": str(fields.get("refusal", ""))})
        else:
            raise ApiError(400, "'type' must be one of 'input_text', 'input_image' or 'output_text'")
    return parts


def _item(item: Json, messages: list[JsonObject]) -> None:
    """Append one input item to ``messages`` (an assistant's items merge into one message)."""
    if not isinstance(item, dict):
        raise ApiError(400, "'input' items must be objects")
    content = item.get("content")
    if isinstance(content, str):
        item = {**item, "content": [{"type": "input_text", "text": content}]}
    prev = messages[-1] if messages and messages[-1].get("role") == "assistant" else None
    role, kind = item.get("role"), item.get("type", "message")
    if role in ("user", "system", "developer") and kind == "message":
        messages.append({"role": role, "content": _input_parts(item)})
    elif role == "assistant" and kind == "message":
        if prev is not None:
            prev["content"] = [*items(prev.get("content") or []), *_input_parts(item)]
        else:
            messages.append({"role": "assistant", "content": _input_parts(item)})
    elif kind == "function_call":
        fn = {"name": str(item.get("name", "")), "arguments": str(item.get("arguments", ""))}
        call: JsonObject = {"id": str(item.get("call_id", "")), "type": "function", "function": fn}
        if prev is not None:
            prev["tool_calls"] = [*items(prev.get("tool_calls") or []), call]
        else:
            messages.append({"role": "assistant", "content": "", "tool_calls": [call]})
    elif kind == "function_call_output":
        output = item.get("output")
        answer = output if isinstance(output, str) else _input_parts({"content": output})
        messages.append({"role": "tool", "tool_call_id": str(item.get("call_id", "")), "content": answer})
    elif kind == "reasoning":
        text = "".join(str(c.get("text", "")) for c in items(item.get("content") or []) if isinstance(c, dict))
        if prev is not None:
            prev["reasoning_content"] = text
        else:
            messages.append({"role": "assistant", "content": "", "reasoning_content": text})
    else:
        raise ApiError(400, "Cannot determine type of 'item'")


def to_chat(body: JsonObject) -> JsonObject:
    """A Responses request as an OpenAI chat request (see the module docstring)."""
    if "input" not in body:
        raise ApiError(400, "'input' is required")
    if body.get("previous_response_id"):
        raise ApiError(400, "llama.cpp does not support 'previous_response_id'.")
    chat = {
        k: v
        for k, v in body.items()
        if k
        not in ("input", "instructions", "tools", "max_output_tokens", "reasoning", "store", "previous_response_id")
    }
    messages: list[JsonObject] = []
    if body.get("instructions") is not None:
        messages.append({"role": "system", "content": str(body["instructions"])})
    inp = body["input"]
    if isinstance(inp, str):
        messages.append({"role": "user", "content": inp})
    elif isinstance(inp, list):
        for item in inp:
            _item(item, messages)
    else:
        raise ApiError(400, "'input' must be a string or array of objects")
    chat["messages"] = messages
    tools = body.get("tools")
    if tools is not None:
        if not isinstance(tools, list):
            raise ApiError(400, "'tools' must be an array of objects")
        fns = [
            {k: v for k, v in t.items() if k != "type"}
            for t in tools
            if isinstance(t, dict) and t.get("type") == "function"
        ]
        if fns:
            chat["tools"] = [{"type": "function", "function": fn} for fn in fns]
    choice = body.get("tool_choice")
    if isinstance(choice, dict) and choice.get("type") == "function" and "name" in choice:
        chat["tool_choice"] = {"type": "function", "function": {"name": choice["name"]}}
    if body.get("max_output_tokens") is not None:
        chat["max_tokens"] = body["max_output_tokens"]
    reasoning = body.get("reasoning")
    if isinstance(reasoning, dict) and "effort" in reasoning:  # llama-server passes its effort on, nothing else
        chat["reasoning_effort"] = reasoning["effort"]
    return chat


class Usage(TypedDict):
    input_tokens: int
    output_tokens: int
    total_tokens: int
    input_tokens_details: CachedTokens


class Part(TypedDict):
    """A ``reasoning_text`` or ``output_text`` content part."""

    type: str
    annotations: NotRequired[list[object]]  # always empty here
    logprobs: NotRequired[list[object]]  # always empty here
    text: str


class Item(TypedDict):
    """An output item: ``reasoning``, ``message`` or ``function_call``."""

    id: str
    type: str
    summary: NotRequired[list[object]]  # always empty here
    role: NotRequired[str]
    content: NotRequired[list[Part]]
    encrypted_content: NotRequired[str]
    status: str
    arguments: NotRequired[str]
    call_id: NotRequired[str]
    name: NotRequired[str]


class ResponseJson(TypedDict):
    """The ``response`` object."""

    id: str
    object: str
    created_at: int
    status: str
    model: str
    output: list[Item]
    completed_at: NotRequired[int]
    usage: NotRequired[Usage]


def _usage(run: ChatRun) -> Usage:
    n = run.n_predicted
    return {
        "input_tokens": run.n_prompt,
        "output_tokens": n,
        "total_tokens": run.n_prompt + n,
        "input_tokens_details": {"cached_tokens": run.n_cached},
    }


class Response:
    """Shapes one chat run as a Responses ``response``, or its stream of events."""

    def __init__(self, run: ChatRun, model: str) -> None:
        self.run, self.model = run, model
        self.id = f"resp_{uuid.uuid4().hex}"
        self.created = int(time.time())
        self._msg_id, self._rs_id = f"msg_{uuid.uuid4().hex}", f"rs_{uuid.uuid4().hex}"
        self._seq = 0

    def _output(self, msg: ChatMessage, status: str = "completed") -> list[Item]:
        out: list[Item] = []
        if msg.reasoning_content:
            text: Part = {"type": "reasoning_text", "text": msg.reasoning_content}
            out.append(
                {
                    "id": self._rs_id,
                    "type": "reasoning",
                    "summary": [],
                    "content": [text],
                    "encrypted_content": "",
                    "status": status,
                }
            )
        if msg.content:
            part: Part = {"type": "output_text", "annotations": [], "logprobs": [], "text": msg.content}
            out.append(
                {"id": self._msg_id, "type": "message", "role": "assistant", "status": status, "content": [part]}
            )
        for call in msg.tool_calls:
            out.append(
                {
                    "id": f"fc_{call.id}",
                    "type": "function_call",
                    "status": status,
                    "arguments": call.arguments,
                    "call_id": call.id,
                    "name": call.name,
                }
            )
        return out

    def _response(self, status: str, output: list[Item]) -> ResponseJson:
        out: ResponseJson = {
            "id": self.id,
            "object": "response",
            "created_at": self.created,
            "status": status,
            "model": self.model,
            "output": output,
        }
        if status == "completed":
            out["completed_at"], out["usage"] = int(time.time()), _usage(self.run)
        return out

    def whole(self) -> ResponseJson:
        return self._response("completed", self._output(self.run.run()))

    def _event(self, name: str, **data: object) -> SseEvent:
        self._seq += 1
        return SseEvent(name, {"type": name, "sequence_number": self._seq - 1, **data})

    def events(self) -> Iterator[SseEvent]:
        yield self._event("response.created", response=self._response("in_progress", []))
        yield self._event("response.in_progress", response=self._response("in_progress", []))
        items: list[str] = []  # "reasoning", "message" or "fc_<id>", in output order
        for deltas, _ in self.run.deltas():
            step = [event for d in deltas for event in self._delta(d, items)]
            if "prompt_progress" in self.run.extras:  # return_progress: llama-server's in_progress event
                step.append(self._event("response.in_progress", response=self._response("in_progress", [])))
            if step:  # timings_per_token, prompt_progress: on the step's last event, as llama-server
                step[-1].data.update(self.run.extras)
            yield from step
        output = self._output(self.run.message)
        for index, item in enumerate(output):
            if item["type"] == "message":
                text = item["content"][0]["text"]
                ids = {"item_id": item["id"], "output_index": index, "content_index": 0}
                yield self._event("response.output_text.done", text=text, **ids)
                yield self._event("response.content_part.done", part=item["content"][0], **ids)
            elif item["type"] == "function_call":
                yield self._event(
                    "response.function_call_arguments.done",
                    item_id=item["id"],
                    output_index=index,
                    arguments=item["arguments"],
                )
            yield self._event("response.output_item.done", item=item, output_index=index)
        completed = self._event("response.completed", response=self._response("completed", output))
        completed.data["timings"] = self.run.result.get("timings", {})
        yield completed

    def _added(self, key: str, item: Item, items: list[str]) -> SseEvent:
        items.append(key)
        return self._event("response.output_item.added", item=item, output_index=len(items) - 1)

    def _delta(self, d: Delta, items: list[str]) -> Iterator[SseEvent]:
        if d.reasoning_content:
            yield from self._reasoning_delta(d.reasoning_content, items)
        if d.content:
            yield from self._text_delta(d.content, items)
        if d.tool_index >= 0:
            yield from self._tool_delta(d, items)

    def _reasoning_delta(self, text: str, items: list[str]) -> Iterator[SseEvent]:
        if "reasoning" not in items:
            item: Item = {
                "id": self._rs_id,
                "type": "reasoning",
                "summary": [],
                "content": [],
                "encrypted_content": "",
                "status": "in_progress",
            }
            yield self._added("reasoning", item, items)
        yield self._event(
            "response.reasoning_text.delta",
            delta=text,
            item_id=self._rs_id,
            output_index=items.index("reasoning"),
            content_index=0,
        )

    def _text_delta(self, text: str, items: list[str]) -> Iterator[SseEvent]:
        if "message" not in items:
            item: Item = {
                "id": self._msg_id,
                "type": "message",
                "role": "assistant",
                "status": "in_progress",
                "content": [],
            }
            yield self._added("message", item, items)
            part = {"type": "output_text", "text": "", "annotations": []}
            yield self._event(
                "response.content_part.added",
                item_id=self._msg_id,
                output_index=len(items) - 1,
                content_index=0,
                part=part,
            )
        yield self._event(
            "response.output_text.delta",
            delta=text,
            item_id=self._msg_id,
            output_index=items.index("message"),
            content_index=0,
        )

    def _tool_delta(self, d: Delta, items: list[str]) -> Iterator[SseEvent]:
        call = self.run.message.tool_calls[d.tool_index]
        key = f"fc_{call.id}"
        if key not in items:
            item: Item = {
                "id": key,
                "type": "function_call",
                "status": "in_progress",
                "arguments": "",
                "call_id": call.id,
                "name": call.name,
            }
            yield self._added(key, item, items)
        if d.tool_arguments:
            yield self._event(
                "response.function_call_arguments.delta",
                delta=d.tool_arguments,
                item_id=key,
                output_index=items.index(key),
            )
