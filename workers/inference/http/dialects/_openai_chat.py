"""A :class:`~workers.inference.http.chat._session.ChatRun` in OpenAI's chat shapes (llama-server's
``to_json_oaicompat_chat`` and ``_stream``): ``chat.completion``, or ``chat.completion.chunk``
deltas opening with the assistant's role and ending with the finish reason (and a usage chunk
when ``stream_options.include_usage`` asks), ``timings`` on the last one."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import NotRequired, TypedDict

from workers.inference.http._record import CompletionUsage, Timings, TokenProbs
from workers.inference.http.chat import ChatMessage, ChatRun, Delta, ToolCallJson, tool_call_json
from workers.inference.http.dialects._llama_server import build_info


class AssistantMessage(TypedDict):
    role: str
    content: str | None
    reasoning_content: NotRequired[str]
    tool_calls: NotRequired[list[ToolCallJson]]


class DeltaCall(TypedDict):
    index: int
    id: NotRequired[str]
    type: NotRequired[str]
    function: NotRequired[dict[str, str]]  # name and arguments, each where the delta has it


class DeltaJson(TypedDict, total=False):
    role: str
    content: str | None
    reasoning_content: str
    tool_calls: list[DeltaCall]


class LogprobsJson(TypedDict):
    content: list[TokenProbs]


class Choice(TypedDict):
    finish_reason: str | None
    index: int
    message: NotRequired[AssistantMessage]
    delta: NotRequired[DeltaJson]
    logprobs: NotRequired[LogprobsJson | None]


class ChatCompletion(TypedDict):
    """``chat.completion``, and each ``chat.completion.chunk`` (with ``delta`` choices, and ``usage``
    only on the usage chunk)."""

    choices: list[Choice]
    created: int
    model: str
    system_fingerprint: str
    object: str
    usage: NotRequired[CompletionUsage]
    id: str
    timings: NotRequired[Timings]
    prompt_progress: NotRequired[dict[str, float]]  # llama-server's return_progress


def message_json(msg: ChatMessage) -> AssistantMessage:
    """The assistant message (``common_chat_msg::to_json_oaicompat``)."""
    out: AssistantMessage = {"role": "assistant", "content": msg.content or (None if msg.tool_calls else "")}
    if msg.reasoning_content:
        out["reasoning_content"] = msg.reasoning_content
    if msg.tool_calls:
        out["tool_calls"] = [tool_call_json(c) for c in msg.tool_calls]
    return out


def usage_json(run: ChatRun) -> CompletionUsage:
    n = run.n_predicted
    return {
        "completion_tokens": n,
        "prompt_tokens": run.n_prompt,
        "total_tokens": run.n_prompt + n,
        "prompt_tokens_details": {"cached_tokens": run.n_cached},
    }


def delta_json(d: Delta) -> DeltaJson:
    """One delta (``server_chat_msg_diff_to_json_oaicompat``)."""
    out: DeltaJson = {}
    if d.reasoning_content:
        out["reasoning_content"] = d.reasoning_content
    if d.content:
        out["content"] = d.content
    if d.tool_index >= 0:
        call: DeltaCall = {"index": d.tool_index}
        if d.tool_id:
            call["id"], call["type"] = d.tool_id, "function"
        fn = {k: v for k, v in (("name", d.tool_name), ("arguments", d.tool_arguments)) if v or k == "arguments"}
        if d.tool_name or d.tool_arguments:
            call["function"] = fn
        out["tool_calls"] = [call]
    return out


class OpenAIChat:
    """Shapes one run; ``model`` is the name served, ``cmpl_id`` the id its completion runs under."""

    def __init__(self, run: ChatRun, model: str, cmpl_id: str | None = None) -> None:
        self.run, self.model = run, model
        self.id = cmpl_id or f"chatcmpl-{uuid.uuid4().hex}"
        self.created = int(time.time())

    def whole(self) -> ChatCompletion:
        msg = self.run.run()
        choice: Choice = {"finish_reason": self.run.finish_reason, "index": 0, "message": message_json(msg)}
        choice["logprobs"] = {"content": self.run.logprobs} if self.run.plan.logprobs is not None else None
        return {
            "choices": [choice],
            "created": self.created,
            "model": self.model,
            "system_fingerprint": build_info(),
            "object": "chat.completion",
            "usage": usage_json(self.run),
            "id": self.id,
            "timings": self.run.result.get("timings", {}),
        }

    def _chunk(
        self,
        delta: DeltaJson,
        finish: str | None = None,
        *,
        logprobs: list[TokenProbs] | None = None,
        timings: Timings | None = None,
    ) -> ChatCompletion:
        choice: Choice = {"finish_reason": finish, "index": 0, "delta": delta}
        if logprobs is not None:
            choice["logprobs"] = {"content": logprobs}
        out: ChatCompletion = {
            "choices": [choice],
            "created": self.created,
            "id": self.id,
            "model": self.model,
            "system_fingerprint": build_info(),
            "object": "chat.completion.chunk",
        }
        if timings is not None:  # llama-server's, on the last chunk
            out["timings"] = timings
        return out

    def chunks(self, include_usage: bool) -> Iterator[ChatCompletion]:
        yield self._chunk({"role": "assistant", "content": None})
        for deltas, logprobs in self.run.deltas():
            step = [
                self._chunk(delta_json(d), logprobs=logprobs if logprobs and i == 0 else None)
                for i, d in enumerate(deltas)
            ]
            if logprobs and not deltas:
                step.append(self._chunk({}, logprobs=logprobs))
            extras = self.run.extras
            if "prompt_progress" in extras:  # llama-server: each progress chunk opens the assistant's turn
                step.append(self._chunk({"role": "assistant", "content": None}))
            if step and "timings" in extras:  # timings_per_token, on the step's last chunk
                step[-1]["timings"] = extras["timings"]
            if step and "prompt_progress" in extras:
                step[-1]["prompt_progress"] = extras["prompt_progress"]
            yield from step
        timings = self.run.result.get("timings", {})
        if not include_usage:
            yield self._chunk({}, self.run.finish_reason, timings=timings)
            return
        yield self._chunk({}, self.run.finish_reason)
        yield {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "system_fingerprint": build_info(),
            "choices": [],
            "usage": usage_json(self.run),
            "timings": timings,
        }
