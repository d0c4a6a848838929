"""Forwarding a request to its model's inference worker.

The body is forwarded as received (its ``model`` was validated with the rest
of the declared shape, and picks the worker; aliases resolve). Streams pass
through chunk by chunk, never buffered. A worker's error answer (llama.cpp's
``{"error": {…}}``) reaches the client as a problem with that same ``error``
object, so every error the router returns is ``application/problem+json``.
Every request ends with a ``request_completed`` event (appended off the
response path) that drives ``last_used`` for LRU eviction and the idle TTL.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx
import structlog
from litestar import Request, Response
from litestar.response import Stream

from service.api.conversations import CONVERSATION_HEADER, ConversationOwners, conversation_id
from service.api.metrics import RouterMetrics
from service.api.principal import principal_of
from service.api.problems import Problem, llama_error_type, problem_response
from service.api.scopes import require_model
from service.cluster.forwarding import forward_headers
from service.cluster.node_client import NodeClient
from service.core import events as ev
from service.core.decision import Append
from service.core.errors import CommandRejected
from service.core.fair_queue import gated
from service.core.proxy_decisions import pooled_hop, records_completion, unresponsive_failure, worker_failure
from service.core.server_mode import ROUTER, ServerMode, target_model
from service.core.state import RouterState
from service.core.token_counts import StreamTokens, TokenCounts, body_counts, counted
from service.event_store.live_state import LiveState
from service.supervision.instances import InstanceSupervisor
from service.supervision.interpreter import Interpreter
from service.supervision.leases import Lease, WorkerUnresponsive
from service.supervision.surroundings import Clock

_FORWARD_HEADERS = ("content-type", "accept", CONVERSATION_HEADER)
_RELAYED_HEADERS = ("process-start-time-unix",)  # a worker's answer keeps these (llama-server's /metrics header)
_log = structlog.get_logger(__name__)


def _nobody(_key: str) -> None:
    return None


@dataclass(frozen=True, slots=True)
class Forwarding:
    """What forwarding a request to its model's worker needs of the service, and nothing else."""

    autoload: bool
    """Whether a request that does not say loads a model that is not loaded (``MODELROUTER_AUTOLOAD``)."""
    instances: InstanceSupervisor
    live: LiveState
    interpreter: Interpreter
    """Records each request's ``request_completed``."""
    http: httpx.AsyncClient
    metrics: RouterMetrics
    clock: Clock
    mode: ServerMode = ROUTER
    """Single-model mode sends every request to its one model, whatever it names."""
    conversations: ConversationOwners = field(default_factory=ConversationOwners)
    """Which model serves each ``X-Conversation-Id`` (the resumable streams' routing)."""
    nodes: NodeClient = field(default_factory=NodeClient)
    """The hop to another node's service (``service/cluster/node_client.py``); local workers go through ``http``."""
    forwarded: Callable[[str], None] = _nobody
    """Told the caller of a request another node served and records (the rate limits count it there)."""


class _Upstream(Protocol):
    """What the proxy reads of an answer: an ``httpx.Response`` (a local worker) or a
    :class:`~service.cluster.node_client.NodeResponse` (another node)."""

    status_code: int

    @property
    def headers(self) -> Mapping[str, str]: ...

    def aiter_raw(self) -> AsyncIterator[bytes]: ...

    async def aread(self) -> bytes: ...

    async def aclose(self) -> None: ...


@dataclass(frozen=True, slots=True)
class Served:
    """What ``request_completed`` says of a request besides its answer: where it went, since when, by whom."""

    instance_id: str
    route: str
    started: float  # monotonic seconds
    key: str  # the caller (service.core.keys: a named key, FULL or ANONYMOUS)


def _record_completion(
    fwd: Forwarding, model: str, served: Served, status: int, stream: bool, counts: TokenCounts
) -> None:
    inst = fwd.live.state.models[model].instance
    if not records_completion(inst, served.instance_id, fwd.instances.settings.node):
        fwd.forwarded(served.key)
        return  # forwarded to another node: that node served it and records it
    charged = counted(served.route, counts)
    event = ev.RequestCompleted(
        instance_id=served.instance_id,
        route=served.route,
        status_code=status,
        stream=stream,
        duration_ms=round((fwd.clock.monotonic() - served.started) * 1000, 2),
        key=served.key,
        prompt_tokens=charged.prompt,
        completion_tokens=charged.completion,
    )
    # Off the response path: the client never waits for this fsync.
    fwd.interpreter.record_later([Append(event, model)])


async def _until_disconnect(request: Request[Any, Any, Any]) -> None:
    # With the body read, the next ASGI message is the client hanging up.
    while (await request.receive())["type"] != "http.disconnect":
        pass


CLIENT_CLOSED = 499
"""nginx's "client closed request": the status recorded for a request whose client hung up while it
waited for its model (nobody reads it; the log and ``request_completed`` say what happened)."""


async def _enter_unless_disconnected(
    request: Request[Any, Any, Any], acquiring: Awaitable[Lease], *, detached: bool = False
) -> Lease | None:
    """Wait for a ready model (maybe queued, maybe loading), but give up the
    place in the queue as soon as the client disconnects (then None: an
    ordinary outcome, not an exception for the ASGI server to log). ``detached``:
    a resumable stream's request waits whatever the client does (llama.cpp's router:
    a page reload during the load must not lose the generation the session keeps)."""
    if detached:
        return await acquiring
    acquire = asyncio.ensure_future(acquiring)
    watch = asyncio.ensure_future(_until_disconnect(request))
    try:
        await asyncio.wait({acquire, watch}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watch.cancel()
    if not acquire.done():
        acquire.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await acquire
        return None  # nobody is listening any more
    return acquire.result()


_RETRY = {"Retry-After": "1"}  # the next request loads the model again
_CRASH_WAIT = 3.0  # seconds to wait for the supervisor to record how a worker that hung up ended


async def _worker_failed(
    live: LiveState, model: str, instance_id: str, exc: httpx.HTTPError, node: str | None = None
) -> Problem:
    """The problem for a request whose worker (or, forwarded, ``node``'s service) stopped answering.
    A dropped connection usually means the worker or the node died: wait (holding the lease, so the
    crash counts this request as in flight) until the fold has its end, and answer with the reason in
    words instead of the transport error's name."""
    if isinstance(exc, WorkerUnresponsive):
        return unresponsive_problem(live, model)
    state: RouterState | None = None
    if not isinstance(exc, httpx.TimeoutException):

        def ended(state: RouterState) -> bool:
            m = state.models.get(model)
            return m is None or m.instance is None or m.instance.instance_id != instance_id

        state = await live.wait_until(ended, _CRASH_WAIT)
    failure = worker_failure(state, model, node, type(exc).__name__)
    return Problem(503, failure.code, failure.message, **failure.extra)


def unresponsive_problem(live: LiveState, model: str) -> Problem:
    """The 503 for a request whose worker was given up as hung (``instance_unresponsive`` recorded why)."""
    hung = unresponsive_failure(live.state.models.get(model), model)
    return Problem(503, hung.code, hung.message, headers=_RETRY, **hung.extra)


_ANTHROPIC_ROUTES = frozenset({"/v1/messages"})


def _shaped(route: str, problem: Problem) -> Problem:
    """``problem`` in the shape of the API being spoken: on Anthropic's Messages route its ``error``
    object is Anthropic's (``type``, ``message``), which the Anthropic SDKs read; elsewhere as it is."""
    if route not in _ANTHROPIC_ROUTES:
        return problem
    extra = {**problem.extra, "error": {"type": "api_error", "message": problem.detail}}
    return Problem(problem.status, problem.code, problem.detail, headers=problem.headers, **extra)


def _stream_error(problem: Problem, route: str = "") -> bytes:
    """An error event at the end of a stream cut short: llama-server's shape (``data: {"error": …}``), or
    on Anthropic's Messages route Anthropic's (``event: error`` with ``{"type": "error", "error": …}``)."""
    if route in _ANTHROPIC_ROUTES:
        body = {"type": "error", "error": {"type": "api_error", "message": problem.detail}}
        return b"event: error\ndata: " + json.dumps(body).encode() + b"\n\n"
    error = {"code": problem.status, "message": problem.detail, "type": llama_error_type(problem.status)}
    return b"data: " + json.dumps({"error": error, **problem.extra}).encode() + b"\n\n"


def _worker_problem(status: int, content: bytes, model: str) -> Problem | None:
    """The worker's ``{"error": {"message", "type", "code", …}}`` as a problem keeping that object (and
    llama-server's additions to it, such as ``exceed_context_size_error``'s ``n_prompt_tokens`` and ``n_ctx``)."""
    try:
        body = json.loads(content)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict) or not isinstance(error.get("message"), str):
        return None
    kind = str(error.get("type") or "server_error")
    code = kind.removesuffix("_error") or "server"
    added = {k: v for k, v in error.items() if k not in ("code", "message", "type")}  # n_prompt_tokens, n_ctx…
    llama_error = {"code": status, "message": error["message"], "type": kind, **added}
    return Problem(status, code, error["message"], model=model, error=llama_error)


def _answer(request: Request[Any, Any, Any], model: str, upstream: _Upstream, content: bytes) -> Response[Any]:
    """A worker's whole answer: as it is, or its error as a problem."""
    status = upstream.status_code
    problem = _worker_problem(status, content, model) if status >= 400 else None
    if problem is not None:
        return problem_response(request, problem)
    kept = {name: upstream.headers[name] for name in _RELAYED_HEADERS if name in upstream.headers}
    media_type = upstream.headers.get("content-type", "application/json")
    return Response(content=content, status_code=status, media_type=media_type, headers=kept)


def _canonical(live: LiveState, name: str) -> str:
    """The model a name resolves to now (as given if it resolves to none: the acquire refuses it)."""
    try:
        found = live.state.resolve(name)
    except CommandRejected:
        return name
    return found.name if found is not None else name


def _forwarded(request: Request[Any, Any, Any]) -> tuple[str, str]:
    """The path (for ``request_completed``) and the target with its query."""
    path = request.url.path
    return path, path + (f"?{request.url.query}" if request.url.query else "")


async def send_upstream(
    fwd: Forwarding, request: Request[Any, Any, Any], url: str, body: bytes, lease: Lease, instance_id: str
) -> _Upstream:
    """Send to the worker (or the node serving it); one that fails to answer releases the lease and says why."""
    caller = principal_of(request).name  # another node: its API key too, and who calls
    headers = forward_headers(request.headers, _FORWARD_HEADERS, lease.node, caller)
    try:
        if pooled_hop(lease.node, url):
            return await fwd.nodes.send(request.method, url, headers, body)
        outgoing = fwd.http.build_request(request.method, url, content=body, headers=headers)
        async with lease.guard():  # a worker given up as hung ends the wait at once
            return await fwd.http.send(outgoing, stream=True)
    except httpx.HTTPError as exc:
        try:
            failure = await _worker_failed(fwd.live, lease.model, instance_id, exc, lease.node)
        finally:
            lease.release()
        raise _shaped(request.url.path, failure) from None
    except BaseException:
        lease.release()
        raise


async def _relay(fwd: Forwarding, upstream: _Upstream, lease: Lease, served: Served) -> AsyncIterator[bytes]:
    """A worker's stream, chunk by chunk; one cut short ends with an error event saying why."""
    model, status = lease.model, upstream.status_code
    raw = upstream.aiter_raw()
    tokens = StreamTokens()
    try:
        while True:
            async with lease.guard():  # around each read, never across the yield to the client
                chunk = await anext(raw, None)
            if chunk is None:
                break
            tokens.feed(chunk)
            yield chunk
    except httpx.HTTPError as exc:
        failure = await _worker_failed(fwd.live, model, served.instance_id, exc, lease.node)
        status = failure.status
        yield _stream_error(failure, served.route)
    finally:
        await upstream.aclose()
        try:
            _record_completion(fwd, model, served, status, True, tokens.close())  # before the release
        finally:
            lease.release()


async def proxy_request(
    request: Request[Any, Any, Any], fwd: Forwarding, requested: str | None, autoload: bool | None
) -> Response[Any]:
    """Route one request for model ``requested`` to its worker (autoloading it if allowed); in
    single-model mode to the one model, whatever ``requested`` says (or when it says nothing)."""
    name = target_model(fwd.mode, requested)
    caller = principal_of(request)
    require_model(caller, fwd.live.state, name, request.url.path)  # before any load it would cause
    started = fwd.clock.monotonic()
    raw = await request.body() if request.method == "POST" else b""
    auto = fwd.autoload if autoload is None else autoload
    path, target = _forwarded(request)
    conv = conversation_id(request.headers) if request.method == "POST" else ""
    ticket = fwd.conversations.remember(conv, _canonical(fwd.live, name)) if conv else 0
    key = principal_of(request).name if gated(fwd.live.state.keys, request.method, path) else None  # fair queues
    acquiring = fwd.instances.acquire(name, autoload=auto, key=key)
    lease = await _enter_unless_disconnected(request, acquiring, detached=ticket > 0)
    if lease is None:
        _log.info("client_disconnected", model=name, route=path, waited_s=round(fwd.clock.monotonic() - started, 3))
        return Response(content=b"", status_code=CLIENT_CLOSED)
    if ticket and not fwd.conversations.alive(conv, ticket):
        lease.release()  # DELETE /v1/stream came while the model loaded: the stop wins, as in llama.cpp
        raise Problem(400, "invalid_request", "request cancelled by a stop while the model was loading")
    model, endpoint = lease.model, lease.endpoint
    fwd.metrics.observe_queue_wait(fwd.clock.monotonic() - started)
    instance = fwd.live.state.models[model].instance  # the one the lease holds: not stopped while leased
    instance_id = instance.instance_id if instance is not None else ""
    served = Served(instance_id, path, started, caller.name)
    upstream = await send_upstream(fwd, request, endpoint + target, raw, lease, instance_id)
    media_type = upstream.headers.get("content-type", "application/json")
    if not media_type.startswith("text/event-stream"):
        try:
            try:
                async with lease.guard():
                    content = await upstream.aread()
            except httpx.HTTPError as exc:
                failure = await _worker_failed(fwd.live, model, instance_id, exc, lease.node)
                raise _shaped(path, failure) from None
            finally:
                await upstream.aclose()
            # Recorded before the release: the log shows the request served before the eviction it allows.
            _record_completion(fwd, model, served, upstream.status_code, False, body_counts(content))
        finally:
            lease.release()
        return _answer(request, model, upstream, content)

    relayed = _relay(fwd, upstream, lease, served)
    return Stream(
        relayed, status_code=upstream.status_code, media_type=media_type, headers={"cache-control": "no-cache"}
    )
