"""The other APIs over the chat path: Anthropic's Messages, OpenAI's Responses and audio
transcriptions (:mod:`._transcriptions`), and the
``input_tokens`` counts (llama-server's ``handle_count_tokens``).

Each converts its request to an OpenAI chat request (``_anthropic.to_chat``,
``_responses.to_chat``), validated by the same ``chat_request`` as
``/v1/chat/completions``, so every chat rule (templates, tools, reasoning,
limits) holds for all of them, and shapes the chat's result its own way.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from workers.inference.http._json import Json, JsonObject, LlamaKwargs
from workers.inference.http._record import RequestRecord
from workers.inference.http.chat import CHAT_DEFAULTS, ChatRun, media_prompt
from workers.inference.http.dialects._anthropic import AnthropicMessage
from workers.inference.http.dialects._anthropic import to_chat as anthropic_to_chat
from workers.inference.http.dialects._requests import chat_request
from workers.inference.http.dialects._responses import Response
from workers.inference.http.dialects._responses import to_chat as responses_to_chat
from workers.inference.http.dialects._server_defaults import with_defaults
from workers.inference.http.dialects._transcriptions import Transcription


def _same(body: JsonObject) -> JsonObject:
    return body


_CONVERT: dict[str, Callable[[JsonObject], JsonObject]] = {
    "messages": anthropic_to_chat,
    "responses": responses_to_chat,
    "chat": _same,
}


def compat_request(
    kind: str, body: JsonObject, model_name: str, *, media: bool = False, defaults: Mapping[str, Json] = {}
) -> tuple[LlamaKwargs, bool]:
    """``(chat kwargs, stream)`` of a ``messages``/``responses``/``chat`` request body (``media``: as
    :func:`~workers.inference.http.dialects._requests.chat_request`; ``defaults``: the server's sampling defaults,
    merged under the converted chat, whose own length field then counts)."""
    chat = with_defaults(_CONVERT[kind](body), defaults, "/chat/completions")
    return chat_request(chat, model_name, media=media, empty=kind == "messages")


def run_compat(front: Any, kind: str, kwargs: LlamaKwargs, stream: bool, result: RequestRecord) -> Any:
    """Run a converted request as a chat; the answer in ``kind``'s shape (events when streaming)."""
    kwargs = {k: v for k, v in kwargs.items() if k != "stream"}
    run = ChatRun(front, front.plan_chat({**CHAT_DEFAULTS, **kwargs}), result)
    shaper: Any
    if kind == "messages":
        shaper = AnthropicMessage(run, front.model_name)
    elif kind == "transcription":
        shaper = Transcription(run)
    else:
        shaper = Response(run, front.model_name)
    if not stream:
        return shaper.whole()
    events: Iterator[Any] = shaper.events()
    return events


def count_tokens(kind: str) -> Any:
    """The handler of ``kind``'s token count: ``{"input_tokens": N}`` (plus ``object`` for OpenAI's)."""

    def handle(front: Any, body: JsonObject) -> JsonObject:
        kwargs, _ = compat_request(kind, body, front.model_name, media=front.llm.projector is not None)
        plan = front.plan_chat(kwargs)
        rendered = plan.rendered
        if plan.media:  # images count their tokens, as the projector splits the prompt
            n = len(media_prompt(front, rendered.prompt, plan.media, add_bos=rendered.add_special).tokens)
        else:
            n = len(front.tokenize(rendered.prompt.encode(), add_bos=rendered.add_special, special=True))
        return {"input_tokens": n} if kind == "messages" else {"input_tokens": n, "object": "response.input_tokens"}

    return handle
