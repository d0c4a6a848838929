"""The worker's side of an Ollama request: the OpenAI-style body it is sent, and its answers as
msgspec Structs, converted once where they arrive (:mod:`._worker`) and read by attribute after.

The worker is our own llama-server-compatible one, so the answers are its shapes: an OpenAI chat or
completion (``choices``, ``usage``, llama-server's ``timings``), llama-server's native ``/infill``
(``content``, ``stop``, ``stop_type``), or ``/v1/embeddings`` (``data``). Members we do not read are
ignored; a member we read that the answer leaves out is :data:`msgspec.UNSET` where its absence
means something different from its default (``choices``, ``content``, a timings count).
"""

from __future__ import annotations

from typing import TypedDict

import msgspec
from msgspec import UNSET, UnsetType

WorkerBody = dict[str, object]
"""The body sent to the worker: OpenAI's chat or completion, or llama-server's ``/infill``, with
the sampling members :func:`service.core.ollama.sampling` names from Ollama's ``options``."""


class TextPart(TypedDict):
    type: str
    text: str


class ImageUrl(TypedDict):
    url: str


class ImagePart(TypedDict):
    type: str
    image_url: ImageUrl


class CalledFunction(TypedDict):
    name: str
    arguments: str


class OpenAIToolCall(TypedDict):
    id: str
    type: str
    function: CalledFunction


class OpenAIMessage(TypedDict, total=False):
    """One message of the chat sent to the worker."""

    role: str
    content: str | list[TextPart | ImagePart]
    tool_calls: list[OpenAIToolCall]
    name: str


class FunctionDelta(msgspec.Struct, frozen=True):
    name: str | None = None
    arguments: str | None = None


class ToolCallDelta(msgspec.Struct, frozen=True):
    """A tool call as OpenAI streams it (by ``index``, arguments in pieces) or answers it whole."""

    index: int = 0
    function: FunctionDelta | None = None


class Said(msgspec.Struct, frozen=True):
    """A choice's ``message``, or a stream's ``delta``."""

    content: str | None = None
    tool_calls: list[ToolCallDelta] | None = None


class Choice(msgspec.Struct, frozen=True):
    text: str | UnsetType | None = UNSET  # a completion's; a chat's choice has none
    delta: Said | None = None
    message: Said | None = None
    finish_reason: str | None = None


class Timings(msgspec.Struct, frozen=True):
    """llama-server's ``timings`` (milliseconds); a missing count falls back to ``usage``'s."""

    prompt_n: int | UnsetType | None = UNSET
    predicted_n: int | UnsetType | None = UNSET
    prompt_ms: float = 0.0
    predicted_ms: float = 0.0


class Usage(msgspec.Struct, frozen=True):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


class Embedding(msgspec.Struct, frozen=True):
    embedding: list[float]
    index: int = 0


class Answer(msgspec.Struct, frozen=True):
    """One worker answer, or one event of its stream."""

    choices: list[Choice] | UnsetType | None = UNSET
    content: str | UnsetType | None = UNSET  # llama-server's native answer (/infill)
    stop: bool = False
    stop_type: str | None = None
    timings: Timings | None = None
    usage: Usage | None = None
    data: list[Embedding] | None = None  # /v1/embeddings


def answer_of(raw: object) -> Answer:
    """The worker's decoded JSON as an :class:`Answer`."""
    return msgspec.convert(raw, Answer)
