"""A worker's HTTP port as a supervisor reads it (``/props``, ``/metrics``, ``/engine/heartbeat``):
a real loopback server that answers fixed bodies, for the supervision parts that ask a worker."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

Answer = tuple[int, bytes]
"""A status and a body."""


@contextmanager
def answering(routes: Mapping[str, Answer]) -> Iterator[str]:
    """Serve ``routes`` (path -> answer; any other path is 404) on a free loopback port; yields its URL."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            status, body = routes.get(self.path, (404, b"{}"))
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
