"""One Ollama request's trip to its model's worker: hold the model (loading it if need be), call
the worker's OpenAI-style route, give the model back and record ``request_completed`` with the
request's ``keep_alive``, which the fold keeps on the instance as its idle limit (so ``0``
unloads the model once idle, through the supervisor's usual idle path, reason ``keep_alive``).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import httpx

from service.api.ollama._upstream import Answer, WorkerBody, answer_of
from service.api.problems import Problem
from service.api.proxy import Forwarding, unresponsive_problem
from service.core import events as ev
from service.core.decision import Append
from service.core.fair_queue import gated
from service.core.keys import ANONYMOUS
from service.core.token_counts import NO_COUNTS, TokenCounts, body_counts, counts_of
from service.supervision.leases import Lease, WorkerUnresponsive


@dataclass
class Trip:
    """A request holding its model: where the worker is, what to record when it ends."""

    fwd: Forwarding
    lease: Lease
    route: str
    keep_alive: float | None
    started: float
    load_ns: int
    instance_id: str = ""
    n_ctx: int | None = None
    stream: bool = False
    key: str = ANONYMOUS  # the caller (service.core.keys)
    counts: TokenCounts = NO_COUNTS  # what the worker's answer said it used
    _ended: bool = field(default=False, repr=False)

    @property
    def model(self) -> str:
        return self.lease.model

    def elapsed_ns(self) -> int:
        return int((self.fwd.clock.monotonic() - self.started) * 1e9)

    async def end(self, status: int) -> None:
        """Record the request and give the model back (once). With a ``keep_alive`` the answer waits
        until the fold has it, so ``/api/ps`` right after shows the new expiry (one fsync; without
        one, the record is off the response path, as the proxy's)."""
        if self._ended:
            return
        self._ended = True
        done = ev.RequestCompleted(
            instance_id=self.instance_id,
            route=self.route,
            status_code=status,
            stream=self.stream,
            duration_ms=round(self.elapsed_ns() / 1e6, 2),
            keep_alive=self.keep_alive,
            key=self.key,
            prompt_tokens=self.counts.prompt,
            completion_tokens=self.counts.completion,
        )
        try:  # recorded before the release: the log shows the request served before any eviction it allows
            if self.keep_alive is None:
                self.fwd.interpreter.record_later([Append(done, self.model)])
            else:
                await self.fwd.interpreter.record([Append(done, self.model)])
        finally:
            self.lease.release()


async def hold(
    fwd: Forwarding, name: str, route: str, keep_alive: float | None, key: str = ANONYMOUS, *, runs: bool = True
) -> Trip:
    """Wait for ``name`` to be ready (loading it when autoload allows, as Ollama always does) and hold it;
    a request that ``runs`` the model (not a bare load) also waits its fair turn at a slot (named keys)."""
    started = fwd.clock.monotonic()
    fair = runs and gated(fwd.live.state.keys, "POST", route)
    lease = await fwd.instances.acquire(name, autoload=fwd.autoload, key=key if fair else None)
    load_ns = int((fwd.clock.monotonic() - started) * 1e9)
    fwd.metrics.observe_queue_wait(load_ns / 1e9)
    found = fwd.live.state.models.get(lease.model)
    inst = found.instance if found is not None else None  # the lease holds it: not stopped meanwhile
    trip = Trip(fwd, lease, route, keep_alive, started, load_ns, key=key)
    if inst is not None:
        trip.instance_id, trip.n_ctx = inst.instance_id, inst.n_ctx
    return trip


def _worker_message(content: bytes) -> str:
    try:
        body = json.loads(content)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return content.decode(errors="replace")[:500]
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return str(error["message"])
    return str(error or body)[:500]


def _refusal(status: int, content: bytes) -> Problem:
    """A worker's error answer. llama-server's 501 (the model lacks what the request needs: FIM
    tokens, a projector) is Ollama's 400 for a capability the model lacks ("does not support")."""
    return Problem(400 if status == 501 else max(status, 400), "worker_error", _worker_message(content))


def _dropped(trip: Trip, exc: httpx.HTTPError) -> Problem:
    if isinstance(exc, WorkerUnresponsive):
        return unresponsive_problem(trip.fwd.live, trip.model)
    return Problem(503, "model_failed", f"the worker of model {trip.model!r} stopped answering: {type(exc).__name__}")


async def call(trip: Trip, path: str, body: WorkerBody) -> Answer:
    """POST ``body`` to the worker and answer its answer; its error as a problem with its message.
    The trip ends here."""
    status = 503
    try:
        async with trip.lease.guard():  # a worker given up as hung ends the wait at once
            answer = await trip.fwd.http.post(trip.lease.endpoint + path, json=body)
        status = answer.status_code
        trip.counts = body_counts(answer.content)
    except httpx.HTTPError as exc:
        raise _dropped(trip, exc) from None
    finally:
        await trip.end(status)
    if status >= 400:
        raise _refusal(status, answer.content)
    return answer_of(answer.json())


async def open_stream(trip: Trip, path: str, body: WorkerBody) -> httpx.Response:
    """Start a streamed call; a worker that refuses the request (before any event) is a problem.
    On success the caller reads :func:`events` and the trip ends when they are done."""
    trip.stream = True
    try:
        request = trip.fwd.http.build_request("POST", trip.lease.endpoint + path, json=body)
        async with trip.lease.guard():
            upstream = await trip.fwd.http.send(request, stream=True)
    except httpx.HTTPError as exc:
        await trip.end(503)
        raise _dropped(trip, exc) from None
    except BaseException:
        await trip.end(499)
        raise
    if upstream.status_code >= 400 or not upstream.headers.get("content-type", "").startswith("text/event-stream"):
        content = await upstream.aread()
        await upstream.aclose()
        await trip.end(upstream.status_code)
        raise _refusal(upstream.status_code, content)
    return upstream


async def events(trip: Trip, upstream: httpx.Response) -> AsyncIterator[Answer]:
    """The worker's server-sent events as answers (``data: [DONE]`` ends them); the trip ends with them.
    A worker that hangs up mid-stream raises :class:`Problem` (the caller writes Ollama's error line)."""
    status = upstream.status_code
    lines = upstream.aiter_lines()
    try:
        while True:
            async with trip.lease.guard():  # around each read, never across the yield
                line = await anext(lines, None)
            if line is None:
                break
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                break
            chunk = json.loads(data)
            trip.counts = trip.counts.merged(counts_of(chunk))
            if isinstance(chunk, dict) and "error" in chunk:
                raise Problem(500, "worker_error", _worker_message(data.encode()))
            yield answer_of(chunk)
    except httpx.HTTPError as exc:
        status = 503
        raise _dropped(trip, exc) from None
    finally:
        await upstream.aclose()
        await trip.end(status)
