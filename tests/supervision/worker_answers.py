"""A worker's HTTP port as a supervisor reads it (``/props``, ``/metrics``, ``/engine/heartbeat``):
a real loopback server that answers fixed bodies, for the supervision parts that ask a worker; with
``key``, locked as a real worker is (its own lock, :mod:`workers.inference.http.server._listener`)."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from workers.inference.engine import EngineError
from workers.inference.http import ApiError
from workers.inference.http.server._listener import LockedHandler

Answer = tuple[int, bytes]
"""A status and a body."""


@contextmanager
def answering(
    routes: Mapping[str, Answer], *, key: str | None = None, seen: list[dict[str, str]] | None = None
) -> Iterator[str]:
    """Serve ``routes`` (path -> answer; any other path is 404) on a free loopback port; yields its URL.
    ``key``: refuse (401) every request without it; ``seen``: the headers of each request are added there."""

    class Handler(LockedHandler):
        worker_key = key

        def do_GET(self) -> None:
            self._answer(*routes.get(self.path, (404, b"{}")))

        def _send_api_error(self, failure: ApiError | EngineError) -> None:
            assert isinstance(failure, ApiError)
            self._answer(failure.status, json.dumps(failure.body()).encode())

        def _answer(self, status: int, body: bytes) -> None:
            # Seen before answering (the lock's 401 too): a client that has its answer finds it in ``seen``.
            if seen is not None:
                seen.append(dict(self.headers))
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
