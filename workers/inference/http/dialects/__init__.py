"""The APIs the worker speaks, each request validated and each answer shaped in its own words.

* OpenAI: ``_requests`` (chat and completion requests), ``_openai_chat``, ``_openai_completion``,
  ``_embeddings``; ``_transcriptions`` (audio); Anthropic's ``_anthropic``; OpenAI's ``_responses``;
  ``_compat`` runs the last three over the chat path.
* llama-server's own: ``_llama_server`` (``/tokenize``, ``/props``...), ``_native_completion``
  (``/completion``), ``_llama_sampling``, ``_server_defaults``, ``_infill``, ``_control``, ``_verbose``
  (``__verbose`` on OpenAI's answers); Vertex AI's ``_predict``.
* ``_sse``: a named server-sent event, as Anthropic's and Responses' streams send them.

This room may know the chat room, never the server; the server imports what it exports here, its own
modules import each other directly.
"""

from __future__ import annotations

from workers.inference.http.dialects._compat import compat_request, count_tokens, run_compat
from workers.inference.http.dialects._control import control, reasoning_control
from workers.inference.http.dialects._embeddings import answer as embedding_answer
from workers.inference.http.dialects._embeddings import tokenize_mixed
from workers.inference.http.dialects._infill import infill_tokens
from workers.inference.http.dialects._llama_sampling import LlamaSampling
from workers.inference.http.dialects._llama_server import (
    apply_template,
    detokenize,
    generation_settings,
    model_info,
    props,
    tokenize,
)
from workers.inference.http.dialects._native_completion import (
    native_chunks,
    native_completion_body,
    native_whole,
    response_fields,
)
from workers.inference.http.dialects._openai_chat import OpenAIChat
from workers.inference.http.dialects._openai_completion import CompletionShaper, with_final_fields
from workers.inference.http.dialects._predict import predict
from workers.inference.http.dialects._requests import (
    RequestOptions,
    chat_request,
    completion_request,
    embedding_request,
    parse_json_object,
    request_options,
)
from workers.inference.http.dialects._server_defaults import load as load_sampling_defaults
from workers.inference.http.dialects._server_defaults import with_defaults
from workers.inference.http.dialects._sse import SseEvent
from workers.inference.http.dialects._transcriptions import NO_AUDIO, parse_form, transcription_chat
from workers.inference.http.dialects._verbose import detokenized, verbose_chat, verbose_completion, wants_verbose

__all__ = [
    "NO_AUDIO",
    "CompletionShaper",
    "LlamaSampling",
    "OpenAIChat",
    "RequestOptions",
    "SseEvent",
    "apply_template",
    "chat_request",
    "compat_request",
    "completion_request",
    "control",
    "count_tokens",
    "detokenize",
    "detokenized",
    "embedding_answer",
    "embedding_request",
    "generation_settings",
    "infill_tokens",
    "load_sampling_defaults",
    "model_info",
    "native_chunks",
    "native_completion_body",
    "native_whole",
    "parse_form",
    "parse_json_object",
    "predict",
    "props",
    "reasoning_control",
    "request_options",
    "response_fields",
    "run_compat",
    "tokenize",
    "tokenize_mixed",
    "transcription_chat",
    "verbose_chat",
    "verbose_completion",
    "wants_verbose",
    "with_defaults",
    "with_final_fields",
]
