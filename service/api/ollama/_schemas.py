"""Ollama's wire types (its ``api/types.go``), as msgspec Structs: validated on the way in and
rendered into ``/schema`` like every other route's. Unknown members are ignored, as Ollama's
Go decoder does, so newer clients' fields (``think``, ``logprobs``...) do not break a request."""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

from service.api.ollama._gguf import Metadata
from service.api.schemas import ModelName

KeepAlive = float | str | None
"""Seconds, or a Go duration (``"5m"``, ``"1h30m"``); 0 unloads after the request, negative never."""
JSONSchema = dict[str, Any]
"""A JSON schema (``format``, a tool's ``parameters``): free-form, passed to the worker as it came."""
Format = Annotated[str | JSONSchema | None, msgspec.Meta(description='"json", or a JSON schema object')]
Options = dict[str, Any] | None  # free-form: checked name by name in service.core.ollama.sampling
HistoryCall = dict[str, Any]
"""A tool call of the history as the client wrote it: free-form, read tolerantly (a call without a
``function`` object still counts), as Ollama's own decoder does."""


class Message(msgspec.Struct, frozen=True):
    role: str
    content: str = ""
    images: list[str] | None = None
    tool_calls: list[HistoryCall] | None = None
    tool_name: str | None = None
    thinking: str | None = None


class ChatBody(msgspec.Struct, frozen=True):
    model: ModelName
    messages: list[Message] = msgspec.field(default_factory=list)
    tools: list[JSONSchema] | None = None  # OpenAI's tool objects, their parameters a JSON schema
    format: Format = None
    options: Options = None
    stream: bool = True
    keep_alive: KeepAlive = None


class GenerateBody(msgspec.Struct, frozen=True):
    model: ModelName
    prompt: str = ""
    suffix: str | None = None
    system: str | None = None
    images: list[str] | None = None
    format: Format = None
    options: Options = None
    stream: bool = True
    raw: bool = False
    keep_alive: KeepAlive = None


class EmbedBody(msgspec.Struct, frozen=True):
    model: ModelName
    input: str | list[str] = ""
    truncate: bool = True
    options: Options = None
    keep_alive: KeepAlive = None
    dimensions: int | None = None


class EmbeddingsBody(msgspec.Struct, frozen=True):
    model: ModelName
    prompt: str = ""
    options: Options = None
    keep_alive: KeepAlive = None


class ModelBody(msgspec.Struct, frozen=True):
    """``/api/show``, ``/api/delete``, ``/api/pull``, ``/api/push``: ``model``, or the older ``name``."""

    model: ModelName | None = None
    name: ModelName | None = None
    stream: bool = True
    verbose: bool = False
    insecure: bool = False

    def named(self) -> str:
        """The model named, whichever member carries it."""
        return self.model or self.name or ""


class CopyBody(msgspec.Struct, frozen=True):
    source: ModelName
    destination: ModelName


class CreateBody(msgspec.Struct, frozen=True):
    model: ModelName | None = None
    name: ModelName | None = None
    stream: bool = True


# --- answers ---------------------------------------------------------------------------------


class Details(msgspec.Struct, frozen=True):
    parent_model: str
    format: str
    family: str
    families: list[str]
    parameter_size: str
    quantization_level: str


class ListedModel(msgspec.Struct, frozen=True):
    name: str
    model: str
    modified_at: str
    size: int
    digest: str
    details: Details


class TagList(msgspec.Struct, frozen=True):
    models: list[ListedModel]


class RunningModel(msgspec.Struct, frozen=True):
    name: str
    model: str
    size: int
    digest: str
    details: Details
    expires_at: str
    size_vram: int
    context_length: int


class RunningList(msgspec.Struct, frozen=True):
    models: list[RunningModel]


class Empty(msgspec.Struct, frozen=True):
    """``{}``: the declared answer of the routes that always refuse (``create``, ``push``)."""


class Version(msgspec.Struct, frozen=True):
    version: str


class Shown(msgspec.Struct, frozen=True):
    modelfile: str
    parameters: str
    template: str
    details: Details
    model_info: Metadata
    capabilities: list[str]
    modified_at: str


class ProgressLine(msgspec.Struct, frozen=True, omit_defaults=True):
    status: str
    digest: str | None = None
    total: int | None = None
    completed: int | None = None


class CalledFunction(msgspec.Struct, frozen=True):
    name: str
    arguments: object  # the JSON the model wrote for the tool's parameters (an object, as asked)


class ToolCall(msgspec.Struct, frozen=True):
    """A tool call of an answer: arguments an object, as Ollama answers them."""

    function: CalledFunction


class ChatMessageOut(msgspec.Struct, frozen=True, omit_defaults=True):
    role: str
    content: str
    tool_calls: list[ToolCall] | None = None


class ChatChunk(msgspec.Struct, frozen=True, omit_defaults=True):
    """One line of ``/api/chat`` (the last has ``done: true`` and the counters)."""

    model: str
    created_at: str
    message: ChatMessageOut
    done: bool
    done_reason: str | None = None
    total_duration: int | None = None
    load_duration: int | None = None
    prompt_eval_count: int | None = None
    prompt_eval_duration: int | None = None
    eval_count: int | None = None
    eval_duration: int | None = None


class GenerateChunk(msgspec.Struct, frozen=True, omit_defaults=True):
    """One line of ``/api/generate``."""

    model: str
    created_at: str
    response: str
    done: bool
    done_reason: str | None = None
    total_duration: int | None = None
    load_duration: int | None = None
    prompt_eval_count: int | None = None
    prompt_eval_duration: int | None = None
    eval_count: int | None = None
    eval_duration: int | None = None


class Embedded(msgspec.Struct, frozen=True):
    model: str
    embeddings: list[list[float]]
    total_duration: int
    load_duration: int
    prompt_eval_count: int


class EmbeddedOld(msgspec.Struct, frozen=True):
    embedding: list[float]
