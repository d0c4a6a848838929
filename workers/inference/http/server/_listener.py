"""The worker's port: its listening socket, and the lock on it (only the service that spawned it gets an answer).

The service hands each worker a secret at spawn (:mod:`service.core.worker_key`); every request must
carry it, ``/health`` included. The check runs right after the request's headers are parsed, before
any route is chosen or any body read: a refused request costs one header lookup and a constant-time
compare, and its connection closes, so its unread body is never taken for the next request.
"""

from __future__ import annotations

from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from service.core import worker_key
from workers.inference.engine import EngineError
from workers.inference.http._errors import ApiError


class LockedHandler(BaseHTTPRequestHandler):
    """A request handler that answers 401 (llama-server's error shape) to any request without the secret."""

    worker_key: str | None = None  # the service's secret, set on the per-server subclass; None: open

    def parse_request(self) -> bool:
        """The stdlib's parse, then the lock; False ends the request (its answer is written)."""
        if not super().parse_request():
            return False
        refused = worker_key.refusal(self.worker_key, self.headers.get(worker_key.HEADER))
        if refused is None:
            return True
        self.close_connection = True
        self._send_api_error(ApiError(401, refused, "authentication_error"))
        return False

    def _send_api_error(self, failure: ApiError | EngineError) -> None:
        raise NotImplementedError  # the handler's: one way to write an error


class Listener(ThreadingHTTPServer):
    """The loopback socket the handlers answer on: a thread per connection, and a deep backlog."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128
