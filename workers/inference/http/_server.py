"""The inference worker's HTTP/1.1 front: OpenAI-compatible routes over stdlib.

Why stdlib ``ThreadingHTTPServer``: the model runs one request at a time
anyway (see :mod:`workers.inference.engine._legacy`), so an async server buys
nothing; a thread per keep-alive connection is cheap at the handful of
connections the service's proxy pool opens, and the added latency is tens
of microseconds. To keep it that low, responses are written with a single
``write`` and ``TCP_NODELAY`` is set (otherwise Nagle + delayed ACK can add
40 ms per keep-alive request). Streams use chunked transfer encoding so the
connection survives them; every SSE event is flushed as its own chunk.

Routes (``/v1`` prefix optional): ``GET /health``, ``GET /v1/models``,
``GET /slots`` and ``GET /metrics`` (batch engine, llama-server's shapes),
``POST /v1/chat/completions``, ``POST /v1/completions``, ``POST /v1/embeddings``;
llama-server's own (batch engine, :mod:`workers.inference.http._llama_server`): ``GET /props``,
``POST /tokenize``, ``/detokenize``, ``/apply-template`` and ``/completion``.
llama-server's other routes answer 501 (``_UNSUPPORTED``).

A request whose client hangs up is cancelled: handlers waiting for results
poll the socket (``_client_gone``), so this holds during prompt processing
too, not only once tokens stream.
"""

from __future__ import annotations

import json
import select
import socket
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from workers.inference import WorkerState
from workers.inference.engine import EngineError, Job
from workers.inference.http import _llama_server as llama_server
from workers.inference.http._app import InferenceApp
from workers.inference.http._compat import compat_request, count_tokens
from workers.inference.http._errors import ApiError, answer_for
from workers.inference.http._requests import (
    MediaInput,
    chat_request,
    completion_request,
    embedding_request,
    parse_json_object,
    request_options,
)
from workers.inference.http._sse import SseEvent

if TYPE_CHECKING:
    from workers.inference.http._front import CompletionFront

MAX_BODY_BYTES = 32 * 1024 * 1024
_NOT_SUPPORTED = "not_supported_error"
_LLAMA_ROUTES: dict[str, Callable[[Any, dict[str, Any]], dict[str, Any]]] = {
    "/tokenize": llama_server.tokenize,
    "/detokenize": llama_server.detokenize,
    "/apply-template": llama_server.apply_template,
    "/messages/count_tokens": count_tokens("messages"),
    "/chat/completions/input_tokens": count_tokens("chat"),
    "/responses/input_tokens": count_tokens("responses"),
}
_COMPAT_ROUTES = {"/messages": "messages", "/responses": "responses"}  # Anthropic's and OpenAI's, over chats
# llama-server's POST routes this worker does not serve (501), with why.
_UNSUPPORTED = {
    "/props": ": properties cannot be changed (llama-server without --props)",
    "/infill": ": no fill-in-the-middle",
    "/embedding": " (use /v1/embeddings)",
    "/rerank": ": no reranking",
    "/reranking": ": no reranking",
    "/chat/completions/control": "",
    "/lora-adapters": ": no LoRA adapters",
}


def _json_bytes(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _sse_bytes(item: Any) -> bytes:
    """One server-sent event: a named one (``SseEvent``) as ``event:`` + ``data:``, else ``data:`` alone."""
    if isinstance(item, SseEvent):
        return b"event: " + item.name.encode() + b"\ndata: " + _json_bytes(item.data) + b"\n\n"
    return b"data: " + _json_bytes(item) + b"\n\n"


def _phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Client Closed Request" if status == 499 else "Unknown"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "modelrouter-worker"
    app: InferenceApp  # set on the per-server subclass

    def setup(self) -> None:
        super().setup()
        if self.connection.family in (socket.AF_INET, socket.AF_INET6):
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:  # stdlib signature
        pass  # per-request lines would drown the stderr tail kept for crash reports

    # -- responses ----------------------------------------------------------

    def _send(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        head = (
            f"HTTP/1.1 {status} {_phrase(status)}\r\n"
            f"Content-Type: {content_type}\r\n"
            f"Content-Length: {len(body)}\r\n" + ("Connection: close\r\n" if self.close_connection else "") + "\r\n"
        )
        self.wfile.write(head.encode("latin-1") + body)

    def _send_json(self, status: int, obj: Any) -> None:
        self._send(status, _json_bytes(obj))

    def _send_api_error(self, failure: ApiError | EngineError) -> None:
        err = answer_for(failure)
        if err.status == 499:  # the client is gone: nobody to answer
            self.close_connection = True
            return
        self._send_json(err.status, err.body())

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        # Protocol-level errors from BaseHTTPRequestHandler: answer JSON, then hang up.
        self.close_connection = True
        self._send_api_error(ApiError(code, message or _phrase(code)))

    # -- routing ------------------------------------------------------------

    def _route(self) -> str:
        path = self.path.split("?", 1)[0].rstrip("/")
        return path[3:] if path.startswith("/v1/") else path

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
        elif route in ("/slots", "/metrics", "/engine/steps"):
            self._send_engine_state(route)
        elif route == "/props":
            try:
                front = self._front(route)
                self._send_json(200, llama_server.props(front, self.app.engine.slot_count, app.model_name))
            except ApiError as err:
                self._send_api_error(err)
        else:
            self._send_api_error(ApiError(404, f"no route GET {route}", "not_found_error"))

    def _send_engine_state(self, route: str) -> None:
        monitor = self.app.engine.monitor
        if monitor is None:  # the legacy engine keeps no live state
            self._send_api_error(ApiError(501, f"{route} needs the batch engine", "not_supported_error"))
        elif self.app.status is not WorkerState.READY:
            self._send_api_error(ApiError(503, "model is not ready", "unavailable_error"))
        elif route == "/slots":
            self._send_json(200, monitor.slots_json())
        elif route == "/engine/steps":
            self._send_json(200, {"steps": monitor.steps_json()})
        else:
            self._send(200, monitor.metrics_text().encode(), "text/plain; version=0.0.4")

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

    def do_POST(self) -> None:
        with self.app.responding():
            self._post()

    def _post(self) -> None:
        route = self._route()
        try:
            raw = self._read_body()
            if route in _LLAMA_ROUTES:
                body = parse_json_object(raw)
                self._send_json(200, _LLAMA_ROUTES[route](self._front(route), body))
                return
            if route in _UNSUPPORTED:
                raise ApiError(501, f"POST {route} is not supported by modelrouter's worker{_UNSUPPORTED[route]}",
                               _NOT_SUPPORTED)  # fmt: skip
            if route not in ("/chat/completions", "/completions", "/completion", "/embeddings", *_COMPAT_ROUTES):
                raise ApiError(404, f"no route POST {route}", "not_found_error")
            job = self._make_job(route, parse_json_object(raw))
            job.client_gone = self._client_gone
            self.app.engine.submit(job)
        except MediaInput as err:
            self._send_api_error(self._media_error(err))
            return
        except (ApiError, EngineError) as err:
            self._send_api_error(err)
            return
        except Exception as exc:  # the batch engine runs the request front on this thread
            self.app.log.error("inference_failed", error=repr(exc))
            self._send_api_error(ApiError(500, f"inference failed: {exc}", "server_error"))
            return
        if job.stream:
            self._respond_stream(job)
        else:
            self._respond_once(job)

    def _media_error(self, err: MediaInput) -> ApiError:
        if self.app.front_options.mmproj is None:
            return err
        return ApiError(501, f"{err.kind} input is not supported by modelrouter's worker yet: the projector "
                        "(--mmproj) is listed but not evaluated", _NOT_SUPPORTED)  # fmt: skip

    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            return self._read_chunked()
        try:
            length = int(self.headers.get("Content-Length", "0"))
        except ValueError:
            self.close_connection = True
            raise ApiError(400, "invalid Content-Length") from None
        if length > MAX_BODY_BYTES or length < 0:
            self.close_connection = True  # the unread body would poison the connection
            raise ApiError(413, f"request body over {MAX_BODY_BYTES} bytes")
        return self.rfile.read(length)

    def _read_chunked(self) -> bytes:
        parts: list[bytes] = []
        total = 0
        while True:
            try:
                size = int(self.rfile.readline(1024).split(b";", 1)[0].strip(), 16)
            except ValueError:
                self.close_connection = True
                raise ApiError(400, "malformed chunked body") from None
            if size == 0:
                while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return b"".join(parts)
            total += size
            if total > MAX_BODY_BYTES:
                self.close_connection = True
                raise ApiError(413, f"request body over {MAX_BODY_BYTES} bytes")
            parts.append(self.rfile.read(size))
            self.rfile.readline(8)  # CRLF after each chunk

    def _make_job(self, route: str, body: dict[str, Any]) -> Job:
        name = self.app.model_name
        if route == "/chat/completions":
            kwargs, stream = chat_request(body, name)
            return Job("chat", kwargs, stream=stream, options=request_options(body))
        if route in _COMPAT_ROUTES:
            self._front(route)
            kwargs, stream = compat_request(_COMPAT_ROUTES[route], body, name)
            return Job(_COMPAT_ROUTES[route], kwargs, stream=stream, options=request_options(body))
        if route == "/completions":
            kwargs, stream = completion_request(body, name)
            return Job("completion", kwargs, stream=stream, options=request_options(body))
        if route == "/completion":  # llama-server's own shape
            self._front(route)
            kwargs, stream = completion_request(llama_server.native_completion_body(body), name)
            return Job("completion", kwargs, stream=stream, options={**request_options(body), "native": True})
        if not self.app.engine.embedding_enabled:
            raise ApiError(400, "this model was not loaded with --embedding; embeddings are unavailable")
        inputs, fmt = embedding_request(body)
        return Job("embedding", {"input": inputs, "encoding_format": fmt})

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

    def _respond_stream(self, job: Job) -> None:
        results = job.results()
        # Errors before the first chunk (e.g. prompt longer than the context)
        # still get a proper status code instead of a 200 stream.
        try:
            first = next(results, None)
        except (ApiError, EngineError) as err:
            self._send_api_error(err)
            return
        except Exception as exc:
            self.app.log.error("inference_failed", error=repr(exc))
            self._send_api_error(ApiError(500, f"inference failed: {exc}", "server_error"))
            return
        head = (
            "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            "Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n"
        )
        try:
            self.wfile.write(head.encode("latin-1"))
            item = first
            while item is not None:
                self._write_chunk(_sse_bytes(item))
                try:
                    item = next(results, None)
                except (ApiError, EngineError) as err:
                    self._write_chunk(b"data: " + _json_bytes(answer_for(err).body()) + b"\n\n")
                    break
                except Exception as exc:
                    self.app.log.error("inference_failed", error=repr(exc))
                    failure = ApiError(500, f"inference failed: {exc}", "server_error")
                    self._write_chunk(b"data: " + _json_bytes(failure.body()) + b"\n\n")
                    break
            else:
                # llama-server ends its own /completion, Anthropic's and Responses' streams without it
                if not job.options.get("native") and job.kind in ("chat", "completion"):
                    self._write_chunk(b"data: [DONE]\n\n")
            self.wfile.write(b"0\r\n\r\n")
        except OSError:
            # Client went away: stop generating for it, drop the connection.
            job.cancel()
            self.close_connection = True


class _TCPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128


def bind_server(app: InferenceApp, *, host: str = "127.0.0.1", port: int = 0) -> tuple[ThreadingHTTPServer, str]:
    """Bind (not serve) and return ``(server, "http://HOST:PORT")``; port 0 picks a free port."""
    handler: Callable[..., _Handler] = type("Handler", (_Handler,), {"app": app})
    server = _TCPServer((host, port), handler)
    bound_host, bound_port = str(server.server_address[0]), int(server.server_address[1])
    return server, f"http://{bound_host}:{bound_port}"
