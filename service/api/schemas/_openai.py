"""Request bodies of the routes proxied to a model's worker, checked in the
service before a worker (or a model slot) is involved.

Shapes follow OpenAI's API for ``/v1/*`` and llama-server's for its own routes.
Only what decides whether a request makes sense is declared; members not named
here pass through untouched (llama.cpp clients send many: ``cache_prompt``,
``n_predict``, ``samplers``, …), because the proxy forwards the body it received,
not the decoded one. The worker validates again: it is also reachable on its own.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import UNSET, Meta, UnsetType

from service.api.schemas._common import ModelName

PassedOn = dict[str, Any]
"""A member the router checks only for being an object and passes to the worker as it came: free-form
here, the worker validates it as llama-server does (a tool's JSON schema, a ``response_format``, a
history's tool calls, a file part, ``stream_options``, ``/infill``'s extra chunks)."""


class _Body(msgspec.Struct, frozen=True):
    model: ModelName


# --- chat messages: a union tagged by "role", as OpenAI defines them ----------


class TextPart(msgspec.Struct, frozen=True, tag_field="type", tag="text"):
    text: str


class ImageUrl(msgspec.Struct, frozen=True):
    url: str
    detail: str | UnsetType = UNSET


class ImagePart(msgspec.Struct, frozen=True, tag_field="type", tag="image_url"):
    image_url: ImageUrl


class InputMedia(msgspec.Struct, frozen=True):
    """llama-server reads ``data`` (base64), else ``url``, and does not check ``format``."""

    data: str | UnsetType = UNSET
    url: str | UnsetType = UNSET
    format: str | UnsetType = UNSET


class AudioPart(msgspec.Struct, frozen=True, tag_field="type", tag="input_audio"):
    input_audio: InputMedia


class VideoUrlPart(msgspec.Struct, frozen=True, tag_field="type", tag="video_url"):
    """OpenAI's spelling of llama-server's ``input_video`` (the worker reads ``data``, else ``url``)."""

    video_url: InputMedia


class VideoPart(msgspec.Struct, frozen=True, tag_field="type", tag="input_video"):
    input_video: InputMedia


class FilePart(msgspec.Struct, frozen=True, tag_field="type", tag="file"):
    file: PassedOn


ContentPart = TextPart | ImagePart | AudioPart | VideoUrlPart | VideoPart | FilePart
TextContent = str | list[TextPart]


class SystemMessage(msgspec.Struct, frozen=True, tag_field="role", tag="system"):
    content: TextContent
    name: str | UnsetType = UNSET


class DeveloperMessage(msgspec.Struct, frozen=True, tag_field="role", tag="developer"):
    content: TextContent
    name: str | UnsetType = UNSET


class UserMessage(msgspec.Struct, frozen=True, tag_field="role", tag="user"):
    content: str | list[ContentPart]
    name: str | UnsetType = UNSET


class AssistantMessage(msgspec.Struct, frozen=True, tag_field="role", tag="assistant"):
    content: str | list[ContentPart] | None = None
    name: str | UnsetType = UNSET
    tool_calls: list[PassedOn] | UnsetType | None = UNSET
    reasoning_content: str | UnsetType | None = UNSET


class ToolMessage(msgspec.Struct, frozen=True, tag_field="role", tag="tool"):
    content: TextContent
    tool_call_id: str | UnsetType = UNSET


class FunctionMessage(msgspec.Struct, frozen=True, tag_field="role", tag="function"):
    content: str | None
    name: str


ChatMessage = SystemMessage | DeveloperMessage | UserMessage | AssistantMessage | ToolMessage | FunctionMessage
Messages = Annotated[list[ChatMessage], Meta(min_length=1)]
Stop = str | list[str] | None


class PromptObject(msgspec.Struct, frozen=True):
    """llama-server's object prompt: ``prompt_string`` (text, or text mixed with token ids) with
    ``multimodal_data`` (base64 files), or OpenAI's ``content`` parts (embedding inputs)."""

    prompt_string: str | list[str | int] | UnsetType = UNSET
    multimodal_data: list[str] | UnsetType = UNSET
    content: list[ContentPart] | UnsetType = UNSET


Prompt = str | list[str | int | list[str | int] | PromptObject] | PromptObject
"""What llama-server's ``tokenize_input_prompts`` reads: a string, token ids, strings mixed with
ids, an object, or a list of those (a list without integers is several prompts)."""
LogitBias = dict[str, float | bool] | list[tuple[int | str, float | bool]]
"""llama-server's forms: ``{"token id or text": bias}`` or ``[[token id or text, bias], ...]``;
``false`` bans the token."""


class _Sampling(_Body, frozen=True):
    stream: bool | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None
    stop: Stop = None
    n: Annotated[int, Meta(ge=1)] | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    logit_bias: LogitBias | None = None
    stream_options: PassedOn | None = None
    n_probs: Annotated[int, Meta(ge=0)] | None = None
    n_cmpl: Annotated[int, Meta(ge=1)] | None = None
    ignore_eos: bool | None = None
    n_keep: Annotated[int, Meta(ge=-1)] | None = None
    cache_prompt: bool | None = None


class ChatRequest(_Sampling, frozen=True, kw_only=True):
    """``/v1/chat/completions`` and ``/chat/completions``."""

    messages: Messages
    max_completion_tokens: int | None = None
    tools: list[PassedOn] | None = None
    tool_choice: str | PassedOn | None = None
    response_format: PassedOn | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = None


class CompletionRequest(_Sampling, frozen=True, kw_only=True):
    """``/v1/completions``, ``/completions`` and llama-server's ``/completion``."""

    prompt: Prompt
    suffix: str | None = None
    echo: bool | None = None
    logprobs: int | None = None


class EmbeddingRequest(_Body, frozen=True):
    """``/v1/embeddings`` (OpenAI's shape)."""

    input: Prompt
    encoding_format: Literal["float", "base64"] | None = None
    dimensions: Annotated[int, Meta(ge=1)] | None = None


class LlamaEmbeddingRequest(_Body, frozen=True):
    """llama-server's ``/embedding`` and ``/embeddings``: ``content`` or ``input``."""

    content: Prompt | UnsetType = UNSET
    input: Prompt | UnsetType = UNSET
    encoding_format: Literal["float", "base64"] | None = None
    embd_normalize: int | None = None


class TokenizeRequest(_Body, frozen=True):
    """llama-server's ``/tokenize``."""

    content: str | list[str | int] | UnsetType = UNSET
    add_special: bool | None = None
    parse_special: bool | None = None
    with_pieces: bool | None = None


class DetokenizeRequest(_Body, frozen=True):
    """llama-server's ``/detokenize``."""

    tokens: list[int] | UnsetType = UNSET


class ApplyTemplateRequest(_Body, frozen=True):
    """llama-server's ``/apply-template``."""

    messages: Messages


class InfillRequest(_Body, frozen=True):
    """llama-server's ``/infill``."""

    input_prefix: str | None = None
    input_suffix: str | None = None
    input_extra: list[PassedOn] | None = None
    prompt: str | None = None
    stream: bool | None = None


class RerankRequest(_Body, frozen=True):
    """llama-server's ``/rerank`` (also ``/reranking``, ``/v1/rerank``, ``/v1/reranking``): Jina's
    ``documents`` or TEI's ``texts``."""

    query: str
    documents: Annotated[list[str], Meta(min_length=1)] | UnsetType = UNSET
    texts: Annotated[list[str], Meta(min_length=1)] | UnsetType = UNSET
    top_n: Annotated[int, Meta(ge=0)] | None = None
    return_text: bool | None = None


class LoraScale(msgspec.Struct, frozen=True):
    """``POST /lora-adapters``: one adapter's new scale (adapters not listed get 0, as llama-server)."""

    id: Annotated[int, Meta(ge=0)]
    scale: float = 0.0


class StreamsLookupRequest(msgspec.Struct, frozen=True):
    """``POST /v1/streams/lookup``: the conversations asked about. As llama-server, what is not
    a list of non-empty strings asks about nothing (entries that are not are skipped)."""

    conversation_ids: Any = None


class PredictInstance(msgspec.Struct, frozen=True, rename={"request_format": "@requestFormat"}):
    """One Vertex AI instance: a routed body (its ``model`` names the worker) and the route."""

    model: ModelName
    request_format: str


class PredictRequest(msgspec.Struct, frozen=True):
    """Vertex AI's ``POST /predict`` (llama-server with ``AIP_MODE=PREDICTION``)."""

    instances: Annotated[list[PredictInstance], Meta(max_length=128)]  # none: llama-server's empty predictions


class SinglePredictRequest(msgspec.Struct, frozen=True):
    """``POST /predict`` in single-model mode: the instances need no ``model`` (the one model answers
    them, as llama-server, whose Vertex AI clients send none); each is the worker's to judge, so one
    that is not an object, or names no ``@requestFormat``, is its own error in the predictions."""

    instances: list[Any]


class ControlRequest(msgspec.Struct, frozen=True, kw_only=True):
    """llama-server's ``POST /v1/chat/completions/control``: act on a running chat completion."""

    id: str | None = None
    """The chat completion's ``id`` (as its answer, or its stream's chunks, give it)."""
    action: str | None = None
    """``reasoning_end``: end its reasoning now (the chat was sent with ``reasoning_control: true``)."""
    model: ModelName | UnsetType = UNSET
    """The model that runs it (llama-server's router needs it); without it, the router asks every running model."""


class ModelRequest(_Body, frozen=True):
    """Any other routed body: only ``model`` is the router's business."""

    stream: bool | None = None
