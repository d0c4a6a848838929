"""A Hugging Face Hub look-alike HTTP server for tests, benchmarks and offline demos.

Run as its own process::

    python -m devtools.hub_server --root DIR [--port 0] [--host 127.0.0.1] [--verbose]

It prints one JSON line ``{"port": N, "url": "http://host:N"}`` on stdout once
it listens, then serves the repos under ``DIR`` (see
:mod:`devtools.hub_repos` for the layout and ``make_repo``).

Implements what huggingface_hub 2.4.0 and llama.cpp need: model info (with and
without ``/revision/<rev>``), recursive tree listing, refs, and
``HEAD``/``GET /<repo>/resolve/<rev>/<file>`` with ranges and the Hub's
headers and ``X-Error-Code`` errors (RepoNotFound, RevisionNotFound,
EntryNotFound, GatedRepo). Bytes are sent with ``sendfile`` so a 1 GB download
is limited by the client, not by this server.

Control endpoints (used by :class:`devtools.hub_control.HubServer`):
``POST /_control/faults`` (``{"faults": [...], "replace": true}``, see
:mod:`devtools.hub_faults`), ``GET /_control/faults``,
``GET /_control/stats``, ``POST /_control/reset_stats``, ``POST /_control/reset``
(clears faults and stats and releases stalled responses), ``GET /_control/health``.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import signal
import socket
import struct
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from devtools.hub_control import HubServer
from devtools.hub_faults import BodyPlan, FaultBook
from devtools.hub_payloads import bearer_token, model_json, parse_range, tree_json
from devtools.hub_repos import HubFile, RepoInfo, file_path, load_repo, make_repo

__all__ = ["HubServer", "RepoInfo", "main", "make_repo", "serve"]

CHUNK = 1 << 20


class HubHTTPServer(ThreadingHTTPServer):
    """Threaded server holding the repo root and the shared fault book."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, addr: tuple[str, int], root: Path, verbose: bool = False) -> None:
        super().__init__(addr, HubHandler)
        self.root = root
        self.book = FaultBook()
        self.verbose = verbose
        self.generation = 0  # bumped by /_control/reset to release stalled responses


class HubHandler(BaseHTTPRequestHandler):
    """One request; routes by path to the API, resolve or control handlers."""

    protocol_version = "HTTP/1.1"  # keep-alive, as real clients expect
    # Headers and a small body go out in separate writes; with Nagle on, the
    # body waits for the client's delayed ACK (~40 ms per API call).
    disable_nagle_algorithm = True
    server: HubHTTPServer

    def log_message(self, format: str, *args: Any) -> None:
        if self.server.verbose:
            super().log_message(format, *args)

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_HEAD(self) -> None:
        self._dispatch("HEAD")

    def do_POST(self) -> None:
        self._dispatch("POST")

    # --- routing ---------------------------------------------------------

    def _dispatch(self, method: str) -> None:
        split = urlsplit(self.path)
        parts = split.path.split("/")[1:]
        query = parse_qs(split.query)
        try:
            if parts and parts[0] == "_control":
                self._control(method, parts[1:])
            elif len(parts) >= 4 and parts[0] == "api" and parts[1] == "models" and method != "POST":
                self._api(method, f"{unquote(parts[2])}/{unquote(parts[3])}", parts[4:], query)
            elif len(parts) >= 5 and parts[2] == "resolve" and method != "POST":
                repo_id = f"{unquote(parts[0])}/{unquote(parts[1])}"
                self._resolve(method, repo_id, unquote(parts[3]), unquote("/".join(parts[4:])))
            else:
                self._json(404, {"error": "not found"}, method=method)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _api(self, method: str, repo_id: str, rest: list[str], query: dict[str, list[str]]) -> None:
        target = {"tree": "tree", "refs": "refs"}.get(rest[0] if rest else "", "info")
        fault = self.server.book.take_status(target, method, repo_id, None)
        self._record(method, repo_id, None, fault.status if fault else None)
        if fault is not None:
            return self._error(fault.status, fault.error_code, f"injected {fault.status}", method=method)
        info = self._access(method, repo_id, gate=False)
        if info is None:
            return
        if not rest:
            return self._json(200, model_json(info, "blobs" in query), method=method)
        if rest[0] == "refs":
            branches = [{"name": n, "ref": f"refs/heads/{n}", "targetCommit": c} for n, c in info.refs.items()]
            return self._json(200, {"branches": branches, "converts": [], "tags": []}, method=method)
        if rest[0] in ("revision", "tree") and len(rest) >= 2:
            commit = self._commit(method, info, unquote(rest[1]))
            if commit is None:
                return
            if rest[0] == "revision":
                return self._json(200, model_json(info, "blobs" in query), method=method)
            recursive = query.get("recursive", ["false"])[0].lower() in ("1", "true")
            sub = unquote("/".join(rest[2:])).strip("/")
            return self._json(200, tree_json(info, sub, recursive), method=method)
        self._json(404, {"error": "not found"}, method=method)

    def _resolve(self, method: str, repo_id: str, revision: str, path: str) -> None:
        fault = self.server.book.take_status("resolve", method, repo_id, path)
        if fault is not None:
            self._record(method, repo_id, path, fault.status)
            return self._error(fault.status, fault.error_code, f"injected {fault.status}", method=method)
        info = self._access(method, repo_id, gate=True)
        commit = self._commit(method, info, revision) if info is not None else None
        if info is None or commit is None:
            return
        hub_file = info.file(path)
        if hub_file is None:
            self._record(method, repo_id, path, 404)
            return self._error(404, "EntryNotFound", f"{path} does not exist at {revision}", method, commit)
        size = hub_file.size
        start, end = 0, size - 1
        rng = self.headers.get("Range") if method == "GET" else None
        if rng:
            parsed = parse_range(rng, size)
            if parsed is None:
                self._record(method, repo_id, path, 416, rng)
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{size}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            start, end = parsed
        status = 206 if rng else 200
        self._record(method, repo_id, path, status, rng)
        self.send_response(status)
        self._file_headers(info, hub_file, commit)
        length = end - start + 1 if size else 0
        self.send_header("Content-Length", str(length if method == "GET" else size))
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        self.end_headers()
        if method == "GET" and length > 0:
            plan = self.server.book.take_body_plan(repo_id, path, method, start, size)
            self._send_body(file_path(self.server.root, repo_id, path), start, length, plan, f"{repo_id}/{path}")

    # --- access checks -----------------------------------------------------

    def _access(self, method: str, repo_id: str, *, gate: bool) -> RepoInfo | None:
        info = load_repo(self.server.root, repo_id)
        token = bearer_token(self.headers.get("Authorization"))
        if info is None or (info.private and token != info.token):
            # Like huggingface.co: 401 when anonymous, 404 otherwise, and the
            # same answer for "missing" and "private" so names do not leak.
            status = 404 if token else 401
            self._error(status, "RepoNotFound", "Repository not found", method=method)
            return None
        if gate and info.gated and token != info.token:
            status = 403 if token else 401
            msg = f"Access to model {repo_id} is restricted. You must have access to it and be authenticated."
            self._error(status, "GatedRepo", msg, method=method)
            return None
        return info

    def _commit(self, method: str, info: RepoInfo, revision: str) -> str | None:
        if revision == info.commit or info.refs.get(revision) == info.commit:
            return info.commit
        self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}", method=method)
        return None

    # --- responses -------------------------------------------------------

    def _file_headers(self, info: RepoInfo, f: HubFile, commit: str) -> None:
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("X-Repo-Commit", commit)
        self.send_header("ETag", f'"{f.etag}"')
        if f.lfs:
            self.send_header("X-Linked-Etag", f'"{f.sha256}"')
            self.send_header("X-Linked-Size", str(f.size))

    def _json(self, status: int, data: Any, *, method: str = "GET", headers: dict[str, str] | None = None) -> None:
        body = json.dumps(data).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if method != "HEAD":
            self.wfile.write(body)

    def _error(
        self, status: int, code: str | None, message: str, method: str = "GET", commit: str | None = None
    ) -> None:
        headers = {"X-Error-Message": message}
        if code:
            headers["X-Error-Code"] = code
        if commit:
            headers["X-Repo-Commit"] = commit  # lets huggingface_hub record a .no_exist entry
        self._json(status, {"error": message}, method=method, headers=headers)

    def _record(self, method: str, repo_id: str, path: str | None, status: int | None, rng: str | None = None) -> None:
        self.server.book.record_request(
            {
                "method": method,
                "repo": repo_id,
                "file": f"{repo_id}/{path}" if path else None,
                "path": self.path,
                "range": rng,
                "status": status,
                "time": time.time(),
            }
        )

    def _send_body(self, src: Path, start: int, length: int, plan: BodyPlan, key: str) -> None:
        book, gen = self.server.book, self.server.generation
        stalls = sorted(plan.stalls)
        chunk = CHUNK if not plan.rate else max(1024, min(CHUNK, int(plan.rate / 20)))
        began, sent, corrupted = time.monotonic(), 0, False
        with open(src, "rb") as f:
            while True:
                while stalls and stalls[0][0] <= sent:
                    if not self._stall(stalls.pop(0)[1], gen):
                        return self._abort(reset=True)
                if plan.drop_at is not None and sent >= plan.drop_at:
                    return self._abort(plan.drop_reset)
                if sent >= length:
                    return
                n = min(chunk, length - sent)
                for point in (plan.drop_at, stalls[0][0] if stalls else None, plan.corrupt_at):
                    if point is not None and point > sent:
                        n = min(n, point - sent)
                # Counted before they leave: a client that has read every byte finds them all counted.
                book.add_bytes(key, n)
                try:
                    if plan.corrupt_at is not None and not corrupted and sent >= plan.corrupt_at:
                        data = bytearray(os.pread(f.fileno(), n, start + sent))
                        data[0] ^= 0xFF  # one flipped byte: same length, different sha256
                        try:
                            self.wfile.write(bytes(data))
                        except OSError:
                            book.add_bytes(key, -n)
                            raise
                        corrupted, written = True, n
                    else:
                        f.seek(start + sent)
                        try:
                            written = self.connection.sendfile(f, start + sent, n)
                        except OSError:
                            book.add_bytes(key, f.tell() - (start + sent) - n)  # what did leave
                            raise
                except OSError:
                    self.close_connection = True
                    return
                sent += written
                if written < n:
                    book.add_bytes(key, written - n)
                if plan.rate:
                    delay = began + sent / plan.rate - time.monotonic()
                    if delay > 0:
                        time.sleep(delay)

    def _stall(self, seconds: float, generation: int) -> bool:
        """Send nothing for ``seconds``; False if the client left or a reset released us."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if self.server.generation != generation:
                return False
            readable, _, _ = select.select([self.connection], [], [], min(0.1, max(0.0, deadline - time.monotonic())))
            if readable:
                try:
                    if self.connection.recv(1, socket.MSG_PEEK) == b"":
                        return False  # client closed its end
                except OSError:
                    return False
        return True

    def _abort(self, reset: bool) -> None:
        """Cut the connection mid-body (FIN, or RST with SO_LINGER 0)."""
        self.close_connection = True
        try:
            if reset:
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            else:
                self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    # --- control -------------------------------------------------------

    def _control(self, method: str, parts: list[str]) -> None:
        book = self.server.book
        name = parts[0] if parts else ""
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"null") if length else None
        if name == "faults" and method == "POST":
            spec = body if isinstance(body, dict) else {"faults": body or []}
            try:
                book.set_faults(list(spec.get("faults") or []), replace=bool(spec.get("replace", True)))
            except (ValueError, TypeError) as exc:
                return self._json(400, {"error": str(exc)})
            return self._json(200, {"faults": book.faults()})
        if name == "faults":
            return self._json(200, {"faults": book.faults()})
        if name == "stats":
            return self._json(200, book.stats())
        if name == "reset_stats" and method == "POST":
            book.reset_stats()
            return self._json(200, {"ok": True})
        if name == "reset" and method == "POST":
            book.reset()
            self.server.generation += 1
            return self._json(200, {"ok": True})
        if name == "health":
            return self._json(200, {"ok": True, "pid": os.getpid()})
        self._json(404, {"error": f"unknown control endpoint {name!r}"})


def serve(root: Path, host: str, port: int, verbose: bool = False) -> None:
    """Listen, announce the port on stdout, serve until SIGTERM/SIGINT."""
    server = HubHTTPServer((host, port), root, verbose)

    def _stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _stop)
    bound = server.server_address[1]
    print(json.dumps({"port": bound, "url": f"http://{host}:{bound}"}), flush=True)
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", required=True, type=Path, help="directory holding <user>/<repo>/repo.json")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port (printed on stdout)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--verbose", action="store_true", help="log every request to stderr")
    args = parser.parse_args(argv)
    args.root.mkdir(parents=True, exist_ok=True)
    serve(args.root.resolve(), args.host, args.port, args.verbose)
    return 0


if __name__ == "__main__":
    sys.exit(main())
