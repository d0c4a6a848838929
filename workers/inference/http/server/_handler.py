"""The inference worker's HTTP/1.1 front: OpenAI-compatible routes over stdlib.

Why stdlib ``ThreadingHTTPServer``: the model runs one request at a time
anyway (see :mod:`workers.inference.engine._legacy`), so an async server buys
nothing; a thread per keep-alive connection is cheap at the handful of
connections the service's proxy pool opens, and the added latency is tens
of microseconds. To keep it that low, responses are written with a single
``write`` and ``TCP_NODELAY`` is set (otherwise Nagle + delayed ACK can add
40 ms per keep-alive request). Streams use chunked transfer encoding so the
connection survives them; every SSE event is flushed as its own chunk.

Routes (``/v1`` prefix optional, but a bare ``/completions`` is ``/completion``: ``_jobs.route_of``):
``GET /health``, ``GET /v1/models``, ``GET /slots`` and ``GET /metrics`` (batch engine, llama-server's shapes),
``POST /v1/chat/completions``, ``POST /v1/completions``, ``POST /v1/embeddings``;
llama-server's own (batch engine, :mod:`workers.inference.http.dialects._llama_server`): ``GET /props``, ``POST
/tokenize``, ``/detokenize``, ``/apply-template``, ``/completion``, ``/v1/audio/transcriptions``,
``/v1/chat/completions/control``; others: 501.

A request whose client hangs up is cancelled: handlers waiting for results poll
the socket (``_client_gone``), during prompt processing too, not only once tokens stream.
"""

from __future__ import annotations

import functools
import select
import socket
from collections.abc import Callable
from http.server import ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from workers.inference._lifecycle import WorkerState
from workers.inference.engine import EngineError, Job
from workers.inference.http._errors import ApiError, answer_for
from workers.inference.http._json import JsonObject
from workers.inference.http.chat import MediaInput
from workers.inference.http.dialects import (
    apply_template,
    control,
    count_tokens,
    detokenize,
    embedding_answer,
    parse_json_object,
    predict,
    props,
    tokenize,
)
from workers.inference.http.server._admin_routes import post_props, set_lora, slot_action
from workers.inference.http.server._app import InferenceApp
from workers.inference.http.server._jobs import COMPAT_KINDS, job_for, make_job, media_error, route_of
from workers.inference.http.server._listener import Listener, LockedHandler
from workers.inference.http.server._streams import Session, replay, replay_offset
from workers.inference.http.server._wire import SSE_HEAD, json_bytes, phrase, read_body, sse_bytes

if TYPE_CHECKING:
    from workers.inference.http.server._front import CompletionFront

MAX_BODY_BYTES = 32 * 1024 * 1024
_NOT_SUPPORTED = "not_supported_error"
_EMBEDDING_ROUTES = ("/embeddings", "/embedding", "/rerank", "/reranking")
_LLAMA_ROUTES: dict[str, Callable[[Any, JsonObject], JsonObject]] = {
    "/tokenize": tokenize,
    "/detokenize": detokenize,
    "/apply-template": apply_template,
    "/messages/count_tokens": count_tokens("messages"),
    "/chat/completions/input_tokens": count_tokens("chat"),
    "/responses/input_tokens": count_tokens("responses"),
}
# GET routes llama-server switches off (--metrics, --no-slots): the option, and its 501 message.
_SWITCHED_OFF = {
    "/metrics": ("endpoint_metrics", "This server does not support metrics endpoint. Start it with `--metrics`"),
    "/slots": ("endpoint_slots", "This server does not support slots endpoint. Start it with `--slots`"),
}


class _Handler(LockedHandler):
    protocol_version = "HTTP/1.1"
    server_version = "modelrouter-worker"
    app: InferenceApp  # set on the per-server subclass
    _gone = False  # the streaming client hung up (a resumable stream goes on without it)

    def setup(self) -> None:
        super().setup()
        if self.connection.family in (socket.AF_INET, socket.AF_INET6):
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:  # stdlib signature
        pass  # per-request lines would drown the stderr tail kept for crash reports

    # -- responses ----------------------------------------------------------

    def _send(self, status: int, body: bytes, content_type: str = "application/json", extra: str = "") -> None:
        head = (
            f"HTTP/1.1 {status} {phrase(status)}\r\n"
            f"Content-Type: {content_type}\r\n{extra}"
            f"Content-Length: {len(body)}\r\n" + ("Connection: close\r\n" if self.close_connection else "") + "\r\n"
        )
        self.wfile.write(head.encode("latin-1") + body)

    def _send_json(self, status: int, obj: Any) -> None:
        self._send(status, json_bytes(obj))

    def _send_api_error(self, failure: ApiError | EngineError) -> None:
        err = answer_for(failure)
        if err.status == 499:  # the client is gone: nobody to answer
            self.close_connection = True
            return
        self._send_json(err.status, err.body())

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        # Protocol-level errors from BaseHTTPRequestHandler: answer JSON, then hang up.
        self.close_connection = True
        self._send_api_error(ApiError(code, message or phrase(code)))

    # -- routing ------------------------------------------------------------

    def _route(self) -> str:
        return route_of(self.path)

    def do_GET(self) -> None:
        route = self._route()
        app = self.app
        if route == "/health":
            if app.status is WorkerState.READY:
                self._send_json(200, {"status": "ok"})
            else:
                self._send_json(503, {"status": app.status.value})
        elif route == "/models":
            entry = {
                "id": app.model_name,
                "object": "model",
                "created": app.created,
                "owned_by": "modelrouter",
                "meta": app.model_meta,
            }
            self._send_json(200, {"object": "list", "data": [entry]})
        elif route == "/engine/heartbeat":  # the service's liveness check: answered in every state
            self._send_json(200, {"status": app.status.value, **app.engine.heartbeat()})
        elif route in ("/slots", "/metrics", "/engine/steps"):
            self._send_engine_state(route)
        elif route == "/stream":
            self._replay()
        elif route in ("/lora-adapters", "/props"):
            try:
                front, opts = self._front(route), app.front_options
                if route == "/lora-adapters":
                    self._send_json(200, front.llm.lora.to_json())
                else:
                    self._send_json(200, props(front, app.engine.slot_count, app.model_name, opts))
            except ApiError as err:
                self._send_api_error(err)
        else:
            self._send_api_error(ApiError(404, f"no route GET {route}", "not_found_error"))

    def _send_engine_state(self, route: str) -> None:
        monitor = self.app.engine.monitor
        switched_off = _SWITCHED_OFF.get(route)
        if switched_off is not None and not getattr(self.app.front_options, switched_off[0]):
            self._send_api_error(ApiError(501, switched_off[1], _NOT_SUPPORTED))  # llama-server's words
        elif monitor is None:  # the legacy engine keeps no live state
            self._send_api_error(ApiError(501, f"{route} needs the batch engine", "not_supported_error"))
        elif self.app.status is not WorkerState.READY:
            self._send_api_error(ApiError(503, "model is not ready", "unavailable_error"))
        elif route == "/slots":
            self._send_json(200, monitor.slots_json())
        elif route == "/engine/steps":
            self._send_json(200, {"steps": monitor.steps_json()})
        else:
            started = f"Process-Start-Time-Unix: {self.app.created}\r\n"  # llama-server's header, in its case
            self._send(200, monitor.metrics_text().encode(), "text/plain; version=0.0.4", started)

    def _front(self, route: str) -> CompletionFront:
        """The engine's request front, for llama-server's own endpoints (501 on an engine without one)."""
        if not self.app.engine.has_front:
            raise ApiError(501, f"{route} needs the batch engine (this worker runs --engine legacy)", _NOT_SUPPORTED)
        front = self.app.front
        if self.app.status is not WorkerState.READY or front is None:
            raise ApiError(503, "model is not ready", "unavailable_error")
        return front

    def _client_gone(self) -> bool:
        """Whether the client hung up: readable with nothing to read means EOF."""
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            return bool(readable) and self.connection.recv(1, socket.MSG_PEEK) == b""
        except (OSError, ValueError):
            return True

    def do_DELETE(self) -> None:
        """``DELETE /v1/stream?conv_id=``: the user's stop; cancels the generation, forgets the stream."""
        try:
            if self._route() != "/stream":
                raise ApiError(404, f"no route DELETE {self._route()}", "not_found_error")
            self._read_body()
            self.app.streams.delete(self.path)
            self._send(204, b"")
        except ApiError as err:
            self._send_api_error(err)

    def do_POST(self) -> None:
        with self.app.responding():
            self._post()

    def _post(self) -> None:
        route = self._route()
        session: Session | None = None
        try:
            raw = self._read_body()
            if route == self.app.front_options.predict_route:  # Vertex AI (AIP_MODE=PREDICTION)
                self._send_json(200, predict(parse_json_object(raw), self._answer))
                return
            if route == "/streams/lookup":
                self._send_json(200, self.app.streams.lookup(parse_json_object(raw)))
                return
            if route in _LLAMA_ROUTES:
                body = parse_json_object(raw)
                self._send_json(200, _LLAMA_ROUTES[route](self._front(route), body))
                return
            if route.startswith("/slots/") or route in ("/lora-adapters", "/props"):
                self._send_json(200, self._admin_route(route, raw))
                return
            if route in _EMBEDDING_ROUTES and self.app.engine.has_front:
                self._send_json(200, self._embedding_route(route, parse_json_object(raw)))
                return
            if route == "/chat/completions/control":  # a running chat's reasoning ended (_control)
                self._front(route)
                self._send_json(200, control(self.app.engine, parse_json_object(raw)))
                return
            if route not in (
                "/chat/completions",
                "/audio/transcriptions",
                "/completions",
                "/completion",
                "/infill",
                *_EMBEDDING_ROUTES,
                *COMPAT_KINDS,
            ):
                raise ApiError(404, f"no route POST {route}", "not_found_error")
            job = job_for(self.app, self._front, route, self.headers.get("Content-Type", ""), raw)
            session = self.app.streams.open(self.headers) if job.stream else None
            job.client_gone = self._client_gone if session is None else session.is_cancelled
            self.app.engine.submit(job)
        except MediaInput as err:
            self._send_api_error(media_error(err, self.app))
            return
        except (ApiError, EngineError) as err:
            if session is not None:  # as llama-server: a request that never streamed leaves no session
                self.app.streams.evict(session)
            self._send_api_error(err)
            return
        except Exception as exc:  # the batch engine runs the request front on this thread
            self.app.log.error("inference_failed", error=repr(exc))
            self._send_api_error(ApiError(500, f"inference failed: {exc}", "server_error"))
            return
        if job.stream:
            self._respond_stream(job, session)
        else:
            self._respond_once(job)

    def _read_body(self) -> bytes:
        try:
            return read_body(self.headers, self.rfile, MAX_BODY_BYTES)
        except ApiError:
            self.close_connection = True  # the unread body would poison the connection
            raise

    def _admin_route(self, route: str, raw: bytes) -> Any:
        """Slot files, LoRA scales and props (:mod:`workers.inference.http.server._admin_routes`)."""
        if route == "/props":
            return post_props(self.app.front_options.endpoint_props)
        front, engine = self._front(route), self.app.engine
        if route == "/lora-adapters":
            return set_lora(engine, front, raw)
        body = parse_json_object(raw or b"{}")
        return slot_action(engine, self.app.front_options.slot_save_path, self.path, route, body)

    def _answer(self, path: str, body: JsonObject) -> Any:
        """A POST route's JSON answer, not written: each of ``/predict``'s instances."""
        route = route_of(path)
        if route in _LLAMA_ROUTES:
            return _LLAMA_ROUTES[route](self._front(route), body)
        if route in _EMBEDDING_ROUTES and self.app.engine.has_front:
            return self._embedding_route(route, body, oai=path.startswith("/v1/"))
        job = make_job(self.app, self._front, route, body)
        job.client_gone = self._client_gone
        self.app.engine.submit(job)
        return list(job.results())[-1]

    def _embedding_route(self, route: str, body: JsonObject, oai: bool | None = None) -> Any:
        """Embeddings and rerank on the batch engine; llama-server: only ``/v1/embeddings`` is OpenAI's."""
        oai = self.path.split("?", 1)[0].startswith("/v1/") if oai is None else oai
        return embedding_answer(self._front(route), route, body, oai=oai, gone=self._client_gone)

    # -- job results --------------------------------------------------------

    def _respond_once(self, job: Job) -> None:
        result: Any = None
        try:
            for item in job.results():
                result = item
        except (ApiError, EngineError) as err:
            self._send_api_error(err)
            return
        except Exception as exc:  # any model error becomes a JSON 500
            self.app.log.error("inference_failed", error=repr(exc))
            self._send_api_error(ApiError(500, f"inference failed: {exc}", "server_error"))
            return
        self._send_json(200, result)

    def _write_chunk(self, payload: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(payload), payload))

    def _emit(self, payload: bytes, session: Session | None) -> None:
        """One SSE event to the client, and to the conversation's session (which outlives the client)."""
        if session is not None:
            session.append(payload)
        if not self._gone:
            try:
                self._write_chunk(payload)
            except OSError:
                if session is None:
                    raise
                self._gone = self.close_connection = True  # the generation goes on, into the session

    def _respond_stream(self, job: Job, session: Session | None = None) -> None:
        results = job.results()
        # Errors before the first chunk (e.g. prompt longer than the context)
        # still get a proper status code instead of a 200 stream.
        try:
            first = next(results, None)
        except (ApiError, EngineError, Exception) as err:
            if session is not None:
                self.app.streams.evict(session)
            if not isinstance(err, ApiError | EngineError):
                self.app.log.error("inference_failed", error=repr(err))
                err = ApiError(500, f"inference failed: {err}", "server_error")
            self._send_api_error(err)
            return
        self._gone = False
        emit = functools.partial(self._emit, session=session)
        try:
            self.wfile.write(SSE_HEAD)
            item = first
            while item is not None:
                emit(sse_bytes(item))
                try:
                    item = next(results, None)
                except (ApiError, EngineError) as err:
                    emit(b"data: " + json_bytes(answer_for(err).body()) + b"\n\n")
                    break
                except Exception as exc:
                    self.app.log.error("inference_failed", error=repr(exc))
                    failure = ApiError(500, f"inference failed: {exc}", "server_error")
                    emit(b"data: " + json_bytes(failure.body()) + b"\n\n")
                    break
            else:
                # llama-server ends its own /completion, Anthropic's and Responses' streams without it
                if not job.options.get("native") and job.kind in ("chat", "completion", "transcription"):
                    emit(b"data: [DONE]\n\n")
            if session is not None:  # done before the client reads the end: a lookup then finds it done
                session.finish()
            if not self._gone:
                self.wfile.write(b"0\r\n\r\n")
        except OSError:
            # Client went away: stop generating for it, drop the connection.
            job.cancel()
            self.close_connection = True
        finally:
            if session is not None:
                session.finish()

    def _replay(self) -> None:
        """``GET /v1/stream?conv_id=&from=``: a conversation's stream from a byte offset, followed to its end."""
        try:
            session = self.app.streams.get(self.path)
            offset = replay_offset(self.path)
            if offset < session.dropped:
                raise ApiError(400, "Stream offset lost, please restart")
            self.wfile.write(SSE_HEAD)
        except ApiError as err:
            self._send_api_error(err)
            return
        try:
            replay(session, offset, self._write_chunk, self._client_gone)
            self.wfile.write(b"0\r\n\r\n")
        except (OSError, ApiError):  # the reader left, or fell behind what the session keeps
            self.close_connection = True


def bind_server(
    app: InferenceApp, *, host: str = "127.0.0.1", port: int = 0, key: str | None = None
) -> tuple[ThreadingHTTPServer, str]:
    """Bind (not serve) and return ``(server, "http://HOST:PORT")``; port 0 picks a free port; ``key``:
    the secret every request must carry (None: open to every local process)."""
    handler: Callable[..., _Handler] = type("Handler", (_Handler,), {"app": app, "worker_key": key})
    server = Listener((host, port), handler)
    bound_host, bound_port = str(server.server_address[0]), int(server.server_address[1])
    return server, f"http://{bound_host}:{bound_port}"
