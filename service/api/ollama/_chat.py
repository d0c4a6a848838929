"""``/api/chat``, ``/api/generate``, ``/api/embed`` and ``/api/embeddings`` on the worker's
``/v1/chat/completions``, ``/v1/completions`` and ``/v1/embeddings``.

As in Ollama, a chat with no messages (a generate with no prompt) only loads the model, and
with ``keep_alive: 0`` unloads it instead (``done_reason`` ``load`` / ``unload``). Streams are
NDJSON, one line per piece of text, then tool calls, then the final line with the counters.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import msgspec
from litestar import Response, post
from litestar.openapi.datastructures import ResponseSpec
from litestar.params import SkipValidation
from litestar.response import Stream
from litestar.status_codes import HTTP_200_OK

import service.api.ollama._schemas as o
import service.api.ollama._translate as t
from service.api.ollama._catalogue import find_model
from service.api.ollama._errors import error_line, ollama_errors
from service.api.ollama._pull import NDJSON
from service.api.ollama._upstream import Answer, Choice, FunctionDelta, Timings, ToolCallDelta, Usage, WorkerBody
from service.api.ollama._worker import Trip, call, events, hold, open_stream
from service.api.problems import Problem
from service.api.proxy import Forwarding
from service.api.scopes import require_model
from service.core.keys import Principal, capped_keep_alive
from service.core.ollama import keep_alive_seconds, model_name
from service.event_store.codec import format_time
from service.supervision.surroundings import Clock

Line = Callable[..., msgspec.Struct]
BodyFor = Callable[[str, int | None], WorkerBody]
_ERRORS = ollama_errors(400, 401, 403, 404, 409, 413, 503)


def _answers(chunk: type[msgspec.Struct]) -> dict[int, ResponseSpec]:
    description = f"`stream: false`: one object; else {NDJSON} lines, the last with `done: true` and the counters"
    return {200: ResponseSpec(data_container=chunk, description=description, generate_examples=False), **_ERRORS}


def _encode(line: msgspec.Struct) -> bytes:
    return msgspec.json.encode(line) + b"\n"


class _Calls:
    """Tool calls streamed as OpenAI deltas (by ``index``, arguments in pieces), put together."""

    def __init__(self) -> None:
        self.names: dict[int, str] = {}
        self.arguments: dict[int, str] = {}

    def add(self, deltas: list[ToolCallDelta]) -> None:
        for delta in deltas:
            function = delta.function or FunctionDelta()
            self.names[delta.index] = self.names.get(delta.index, "") + (function.name or "")
            self.arguments[delta.index] = self.arguments.get(delta.index, "") + (function.arguments or "")

    def done(self) -> list[o.ToolCall]:
        whole = [FunctionDelta(self.names[i], self.arguments[i]) for i in sorted(self.names)]
        return t.tool_calls_in([ToolCallDelta(i, f) for i, f in enumerate(whole)])


async def _lines(trip: Trip, upstream: httpx.Response, name: str, line: Line, clock: Clock) -> AsyncIterator[bytes]:
    calls, finish = _Calls(), None
    timings: Timings | None = None
    usage: Usage | None = None
    try:
        async for chunk in events(trip, upstream):
            timings = chunk.timings or timings
            usage = chunk.usage or usage
            for choice in t.choices_of(chunk):
                finish = choice.finish_reason or finish
                calls.add((choice.delta.tool_calls if choice.delta else None) or [])
                text = t.choice_text(choice)
                if text:
                    yield _encode(line(name, format_time(clock.now()), text, False))
    except Problem as problem:
        yield error_line(problem.detail)
        return
    stamp = format_time(clock.now())
    found = calls.done()
    if found:
        yield _encode(line(name, stamp, "", False, tool_calls=found))
    extra = t.counters(timings, usage, trip.load_ns, trip.elapsed_ns())
    yield _encode(line(name, stamp, "", True, done_reason=t.done_reason(finish), **extra))


async def _infer(
    fwd: Forwarding,
    clock: Clock,
    name: str,
    route: str,
    stream: bool,
    keep: float | None,
    path: str,
    body_for: BodyFor,
    line: Line,
    caller: Principal,
) -> Response[Any]:
    require_model(caller, fwd.live.state, model_name(name), route)
    trip = await hold(fwd, model_name(name), route, keep, caller.name)
    try:
        body = body_for(trip.model, trip.n_ctx)
    except BaseException:
        await trip.end(400)
        raise
    if stream:
        upstream = await open_stream(trip, path, body)
        return Stream(_lines(trip, upstream, name, line, clock), media_type=NDJSON)
    answer = await call(trip, path, body)
    choice = (t.choices_of(answer) or [Choice()])[0]
    calls = t.tool_calls_in((choice.message.tool_calls if choice.message else None) or [])
    extra = t.counters(answer.timings, answer.usage, trip.load_ns, trip.elapsed_ns())
    reason = t.done_reason(choice.finish_reason)
    stamp = format_time(clock.now())
    return Response(line(name, stamp, t.choice_text(choice), True, done_reason=reason, tool_calls=calls, **extra))


async def _load_or_unload(fwd: Forwarding, name: str, route: str, keep: float | None, caller: Principal) -> str:
    """An empty request: load the model (``load``), or with ``keep_alive: 0`` unload it (``unload``)."""
    require_model(caller, fwd.live.state, model_name(name), route)
    if keep == 0:
        found = find_model(fwd.live.state, name)
        if found.instance is not None:
            await fwd.instances.unload(found.name, reason="keep_alive")
        return "unload"
    trip = await hold(fwd, model_name(name), route, keep, caller.name, runs=False)
    await trip.end(200)
    return "load"


@post("/chat", operation_id="ollamaChat", tags=["ollama"], status_code=HTTP_200_OK, responses=_answers(o.ChatChunk))
async def chat(
    data: o.ChatBody, forwarding: Forwarding, clock: SkipValidation[Clock], caller: Principal
) -> Response[Any]:
    """Ollama's chat: the model's chat template, tools, ``format``, ``options``, ``keep_alive``."""
    keep = capped_keep_alive(caller.scope, keep_alive_seconds(data.keep_alive))  # a key's max_keep_alive
    if not data.messages:
        reason = await _load_or_unload(forwarding, data.model, "/api/chat", keep, caller)
        return Response(t.chat_line(data.model, format_time(clock.now()), "", True, done_reason=reason))

    def body_for(model: str, n_ctx: int | None) -> WorkerBody:
        return t.chat_body(data, model, n_ctx)

    return await _infer(
        forwarding,
        clock,
        data.model,
        "/api/chat",
        data.stream,
        keep,
        "/v1/chat/completions",
        body_for,
        t.chat_line,
        caller,
    )


@post(
    "/generate",
    operation_id="ollamaGenerate",
    tags=["ollama"],
    status_code=HTTP_200_OK,
    responses=_answers(o.GenerateChunk),
)
async def generate(
    data: o.GenerateBody, forwarding: Forwarding, clock: SkipValidation[Clock], caller: Principal
) -> Response[Any]:
    """Ollama's generate: a prompt through the chat template (``system`` before it), or ``raw``."""
    keep = capped_keep_alive(caller.scope, keep_alive_seconds(data.keep_alive))  # a key's max_keep_alive
    if not data.prompt and not data.images:
        reason = await _load_or_unload(forwarding, data.model, "/api/generate", keep, caller)
        return Response(t.generate_line(data.model, format_time(clock.now()), "", True, done_reason=reason))

    def body_for(model: str, n_ctx: int | None) -> WorkerBody:
        return t.generate_body(data, model, n_ctx)

    path = t.generate_path(data)
    return await _infer(
        forwarding, clock, data.model, "/api/generate", data.stream, keep, path, body_for, t.generate_line, caller
    )


def _shorten(vector: list[float], dimensions: int | None) -> list[float]:
    """Ollama's ``dimensions``: the first N components, normalised again."""
    if dimensions is None or dimensions >= len(vector):
        return vector
    cut = vector[:dimensions]
    norm = math.sqrt(sum(x * x for x in cut)) or 1.0
    return [x / norm for x in cut]


async def _embed(
    fwd: Forwarding, name: str, route: str, inputs: list[str], keep: float | None, caller: Principal
) -> tuple[Trip, Answer]:
    require_model(caller, fwd.live.state, model_name(name), route)
    trip = await hold(fwd, model_name(name), route, keep, caller.name)
    if not inputs:
        await trip.end(200)
        return trip, Answer(data=[])
    return trip, await call(trip, "/v1/embeddings", {"model": trip.model, "input": inputs})


def _vectors(answer: Answer) -> list[list[float]]:
    rows = sorted(answer.data or [], key=lambda d: d.index)
    return [list(row.embedding) for row in rows]


@post(
    "/embed",
    operation_id="ollamaEmbed",
    tags=["ollama"],
    status_code=HTTP_200_OK,
    responses={**ollama_errors(400, 401, 403, 404, 409, 413, 503)},
)
async def embed(data: o.EmbedBody, forwarding: Forwarding, caller: Principal) -> o.Embedded:
    """Embeddings of one text or several, with any model (the engine embeds on a second context)."""
    if data.dimensions is not None and data.dimensions <= 0:
        raise Problem(400, "invalid_request", "dimensions must be a positive integer")
    inputs = ([data.input] if data.input else []) if isinstance(data.input, str) else list(data.input)
    keep = capped_keep_alive(caller.scope, keep_alive_seconds(data.keep_alive))  # a key's max_keep_alive
    trip, answer = await _embed(forwarding, data.model, "/api/embed", inputs, keep, caller)
    return o.Embedded(
        model=data.model,
        embeddings=[_shorten(v, data.dimensions) for v in _vectors(answer)],
        total_duration=trip.elapsed_ns(),
        load_duration=trip.load_ns,
        prompt_eval_count=int((answer.usage.prompt_tokens if answer.usage else 0) or 0),
    )


@post(
    "/embeddings",
    operation_id="ollamaEmbeddings",
    tags=["ollama"],
    status_code=HTTP_200_OK,
    responses={**ollama_errors(400, 401, 403, 404, 409, 413, 503)},
)
async def embeddings(data: o.EmbeddingsBody, forwarding: Forwarding, caller: Principal) -> o.EmbeddedOld:
    """The older single-text form (superseded by ``/api/embed`` in Ollama, still used by clients)."""
    keep = capped_keep_alive(caller.scope, keep_alive_seconds(data.keep_alive))  # a key's max_keep_alive
    inputs = [data.prompt] if data.prompt else []
    _trip, answer = await _embed(forwarding, data.model, "/api/embeddings", inputs, keep, caller)
    vectors = _vectors(answer)
    return o.EmbeddedOld(embedding=vectors[0] if vectors else [])
