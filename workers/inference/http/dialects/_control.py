"""llama-server's ``POST /v1/chat/completions/control``: act on a chat completion while it runs.

``{"id": <the completion's id>, "action": "reasoning_end"}`` ends the reasoning of the chat whose
answer carries that ``id`` (llama-server's ``post_control`` in ``server-context.cpp``), provided it
was sent with ``reasoning_control: true``; the engine forces the template's closing tag
(:mod:`workers.inference.engine._reasoning`). The answers are llama-server's: 400 without an ``id``
or with another action; else 200 ``{"success": true}``, or ``{"success": false, "message"}``
when no completion with that id is running or it was not armed. Asked outside its reasoning
(before the tag opens it, or after it closed), the call succeeds and changes nothing, as there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from workers.inference.engine import ReasoningControl, ThinkTags
from workers.inference.http._errors import ApiError
from workers.inference.http._json import JsonObject
from workers.inference.http.chat import FAMILIES, ChatPlan

if TYPE_CHECKING:
    from workers.inference.llama import LlamaModel

ACTIONS = ("reasoning_end",)


def control(engine: Any, body: JsonObject) -> JsonObject:
    """The control's answer (``engine``: the batch engine, the caller checked; the legacy one has no slots)."""
    cmpl_id = body.get("id")
    if not isinstance(cmpl_id, str) or not cmpl_id:
        raise ApiError(400, "missing completion id")
    if body.get("action") not in ACTIONS:
        raise ApiError(400, "unknown control action")
    refused = engine.end_reasoning(cmpl_id)
    return {"success": True} if refused is None else {"success": False, "message": refused}


def reasoning_control(llm: LlamaModel, plan: ChatPlan) -> ReasoningControl | None:
    """What lets a chat's reasoning be ended, if it asked (``reasoning_control``): its template family's
    tags (the closing one as tokens, special ones parsed as such), and which the prompt opened, if any."""
    if not plan.reasoning_control:
        return None
    pairs = FAMILIES[plan.family].think
    tags = tuple(
        ThinkTags(o.encode(), c.encode(), tuple(llm.tokenize_whole(c.encode(), add_special=False, parse_special=True)))
        for o, c in pairs
    )
    tail = plan.rendered.prompt.rstrip()
    opened = next((i for i, (o, _) in enumerate(pairs) if tail.endswith(o.rstrip())), None)
    return ReasoningControl(tags, opened)
