"""A :class:`~workers.inference.http.chat._session.ChatRun` in OpenAI's chat shapes (llama-server's
``to_json_oaicompat_chat`` and ``_stream``): ``chat.completion``, or ``chat.completion.chunk``
deltas opening with the assistant's role and ending with the finish reason (and a usage chunk
when ``stream_options.include_usage`` asks), ``timings`` on the last one."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

from workers.inference.http.chat import ChatMessage, ChatRun, Delta, tool_call_json
from workers.inference.http.dialects._llama_server import build_info


def message_json(msg: ChatMessage) -> dict[str, Any]:
    """The assistant message (``common_chat_msg::to_json_oaicompat``)."""
    out: dict[str, Any] = {"role": "assistant", "content": msg.content or (None if msg.tool_calls else "")}
    if msg.reasoning_content:
        out["reasoning_content"] = msg.reasoning_content
    if msg.tool_calls:
        out["tool_calls"] = [tool_call_json(c) for c in msg.tool_calls]
    return out


def usage_json(run: ChatRun) -> dict[str, Any]:
    n = run.n_predicted
    return {
        "completion_tokens": n,
        "prompt_tokens": run.n_prompt,
        "total_tokens": run.n_prompt + n,
        "prompt_tokens_details": {"cached_tokens": run.n_cached},
    }


def delta_json(d: Delta) -> dict[str, Any]:
    """One delta (``server_chat_msg_diff_to_json_oaicompat``)."""
    out: dict[str, Any] = {}
    if d.reasoning_content:
        out["reasoning_content"] = d.reasoning_content
    if d.content:
        out["content"] = d.content
    if d.tool_index >= 0:
        call: dict[str, Any] = {"index": d.tool_index}
        if d.tool_id:
            call.update(id=d.tool_id, type="function")
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

    def whole(self) -> dict[str, Any]:
        msg = self.run.run()
        choice: dict[str, Any] = {"finish_reason": self.run.finish_reason, "index": 0, "message": message_json(msg)}
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

    def _chunk(self, delta: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
        choice: dict[str, Any] = {"finish_reason": finish, "index": 0, "delta": delta}
        if "logprobs" in extra:
            choice["logprobs"] = {"content": extra.pop("logprobs")}
        return {
            "choices": [choice],
            "created": self.created,
            "id": self.id,
            "model": self.model,
            "system_fingerprint": build_info(),
            "object": "chat.completion.chunk",
            **extra,
        }

    def chunks(self, include_usage: bool) -> Iterator[dict[str, Any]]:
        yield self._chunk({"role": "assistant", "content": None})
        for deltas, logprobs in self.run.deltas():
            for i, d in enumerate(deltas):
                extra: dict[str, Any] = {"logprobs": logprobs} if logprobs and i == 0 else {}
                yield self._chunk(delta_json(d), **extra)
            if logprobs and not deltas:
                yield self._chunk({}, logprobs=logprobs)
        timings = self.run.result.get("timings", {})
        if not include_usage:
            yield self._chunk({}, self.run.finish_reason, timings=timings)
            return
        yield self._chunk({}, self.run.finish_reason)
        base = {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "system_fingerprint": build_info(),
        }
        yield {**base, "choices": [], "usage": usage_json(self.run), "timings": timings}
