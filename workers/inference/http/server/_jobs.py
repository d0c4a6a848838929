"""A request body → the engine :class:`~workers.inference.engine.Job` that answers it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from workers.inference.engine import Job
from workers.inference.http._errors import ApiError
from workers.inference.http._json import JsonObject, LlamaKwargs
from workers.inference.http.chat import MediaInput
from workers.inference.http.dialects import (
    NO_AUDIO,
    RequestOptions,
    chat_request,
    compat_request,
    completion_request,
    embedding_request,
    infill_tokens,
    native_completion_body,
    parse_form,
    parse_json_object,
    request_options,
    response_fields,
    transcription_chat,
    wants_verbose,
    with_defaults,
)
from workers.inference.http.server._app import InferenceApp

_NOT_SUPPORTED = "not_supported_error"
COMPAT_KINDS = {"/messages": "messages", "/responses": "responses"}  # Anthropic's and OpenAI's, over chats


def route_of(path: str) -> str:
    """The handler a request path reaches, as llama-server registers them (``server.cpp``): ``/v1`` is
    optional, but a bare ``/completions`` is llama-server's native ``/completion`` (both
    ``post_completions``); only ``/v1/completions`` is OpenAI's (``post_completions_oai``)."""
    path = path.split("?", 1)[0].rstrip("/")
    if path == "/completions":
        return "/completion"
    return path[3:] if path.startswith("/v1/") else path


def make_job(app: InferenceApp, front: Callable[[str], Any], route: str, body: JsonObject) -> Job:
    """The engine job of a completion, chat, infill or embedding request (``front(route)``: 501/503 checks)."""
    name = app.model_name
    media = takes_media(app)
    defaults = app.front_options.sampling_defaults  # llama-server's sampling options, under every request
    if route in COMPAT_KINDS:
        front(route)
        kwargs, stream = compat_request(COMPAT_KINDS[route], body, name, media=media, defaults=defaults)
        return Job(
            COMPAT_KINDS[route],
            kwargs,
            stream=stream,
            options=dict(request_options(with_defaults(body, defaults, route))),
        )
    body = with_defaults(body, defaults, route)
    verbose = app.front_options.verbose  # llama-server's -v: every OpenAI answer's __verbose, unless it asks
    if route == "/chat/completions":
        kwargs, stream = chat_request(body, name, media=media)
        chat_options: RequestOptions = {**request_options(body), "verbose": wants_verbose(body, verbose)}
        return Job("chat", kwargs, stream=stream, options=dict(chat_options))
    if route == "/completions":
        kwargs, stream = completion_request(body, name, media=media)
        openai_options: RequestOptions = {**request_options(body), "verbose": wants_verbose(body, verbose)}
        return completion_job(app, kwargs, stream, openai_options)
    if route == "/infill":  # fill-in-the-middle: a native completion of the FIM prompt
        body = {**body, "prompt": infill_tokens(front(route), body, spm=app.front_options.spm_infill)}
        route = "/completion"
    if route == "/completion":  # llama-server's own shape
        front(route)
        kwargs, stream = completion_request(native_completion_body(body), name, media=media)
        if body.get("post_sampling_probs") is True:  # n_probs read after the sampler chain
            kwargs["llama_sampling"] = {**kwargs.get("llama_sampling", {}), "post_sampling_probs": True}
        options: RequestOptions = {**request_options(body), "native": True, "response_fields": response_fields(body)}
        return completion_job(app, kwargs, stream, options)
    if route in ("/rerank", "/reranking"):
        raise ApiError(501, "POST /rerank needs the batch engine (this worker runs --engine legacy)", _NOT_SUPPORTED)
    if not app.engine.embedding_enabled:
        msg = "This server does not support embeddings. Start it with `--embeddings`"
        raise ApiError(501, msg, _NOT_SUPPORTED)
    inputs, fmt = embedding_request(body)
    return Job("embedding", {"input": inputs, "encoding_format": fmt})


def completion_job(app: InferenceApp, kwargs: LlamaKwargs, stream: bool, options: RequestOptions) -> Job:
    """A completion's job; several prompts (``kwargs["prompts"]``) go to its options, where the front
    runs one completion each (``server._multi``)."""
    prompts = kwargs.pop("prompts", None)
    if prompts is not None:
        if not app.engine.has_front:
            msg = "several prompts in one request need the batch engine (this worker runs --engine legacy)"
            raise ApiError(501, msg, _NOT_SUPPORTED)
        if options.get("n_cmpl", 1) > 1:
            raise ApiError(400, "'n_cmpl' (or 'n') above 1 takes one prompt (send one request per prompt)")
        return Job("completion", kwargs, stream=stream, options={**options, "prompts": prompts})
    return Job("completion", kwargs, stream=stream, options=dict(options))


def job_for(app: InferenceApp, front: Callable[[str], Any], route: str, content_type: str, raw: bytes) -> Job:
    """The job of a POST body: OpenAI's transcription form (multipart), else a JSON object (:func:`make_job`)."""
    if route == "/audio/transcriptions":
        return transcription_job(app, front, content_type, raw)
    return make_job(app, front, route, parse_json_object(raw))


def transcription_job(app: InferenceApp, front: Callable[[str], Any], content_type: str, raw: bytes) -> Job:
    """The chat job of OpenAI's ``/v1/audio/transcriptions`` form (:mod:`._transcriptions`); llama-server's
    501 when the model's projector takes no audio."""
    projector = getattr(front("/audio/transcriptions").llm, "projector", None)
    if projector is None or not projector.audio:
        raise ApiError(501, NO_AUDIO, _NOT_SUPPORTED)
    body = transcription_chat(*parse_form(content_type, raw))
    kwargs, stream = chat_request(body, app.model_name, media=True)
    return Job("transcription", kwargs, stream=stream, options=dict(request_options(body)))


def takes_media(app: InferenceApp) -> bool:
    """Whether chats may carry media parts: a projector (``--mmproj``) on the batch engine."""
    return app.front_options.mmproj is not None and app.engine.has_front


def media_error(err: MediaInput, app: InferenceApp) -> ApiError:
    """Media input the model cannot take: llama-server's 400, or 501 where the projector is there but
    the engine cannot evaluate it (``--engine legacy``)."""
    if app.front_options.mmproj is None or app.engine.has_front:
        return err
    return ApiError(501, f"{err.kind} input needs the batch engine (this worker runs --engine legacy)", _NOT_SUPPORTED)
