"""Run the real service as a subprocess (tests, benchmarks, demos)."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx
import psutil

from service.core import worker_key
from service.supervision.ports import free_port


def _hermetic(environ: Mapping[str, str], home: Path) -> dict[str, str]:
    """The caller's environment without what would point the service at the developer's
    own models: llama.cpp's variables and cache locations. llama.cpp's cache defaults to
    ``<home>/hf-home/hub`` (a test that means to share one passes LLAMA_CACHE or HF_HOME)."""
    dropped = ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "MODEL_ENDPOINT", "HF_HUB_OFFLINE")
    kept = {k: v for k, v in environ.items() if not k.startswith("LLAMA_") and k not in dropped}
    kept["HF_HOME"] = str(home / "hf-home")
    return kept


def worker_headers(pid: int) -> dict[str, str]:
    """The header that opens the port of the service's worker ``pid``, for a test or a benchmark that talks
    to that worker directly: its secret, read from the environment it was started with
    (``/proc/PID/environ``, which only its own user may read; docs/security.md)."""
    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    prefix = worker_key.ENV.encode() + b"="
    key = next(entry[len(prefix) :] for entry in environ if entry.startswith(prefix))
    return {worker_key.HEADER: key.decode()}


_BIND_REFUSED = "modelrouter serve: error: couldn't bind "
"""How ``serve`` says its port is taken (service/cli.py, llama-server's words)."""


def _listens(pid: int, port: int) -> bool:
    """Whether process ``pid`` itself listens on TCP ``port``."""
    try:
        sockets = psutil.Process(pid).net_connections(kind="tcp")
    except psutil.NoSuchProcess:
        return False
    return any(s.status == psutil.CONN_LISTEN and s.laddr and s.laddr.port == port for s in sockets)


class PortTaken(RuntimeError):
    """The service could not bind its port: another process holds it."""


class ServiceProcess:
    """``modelrouter serve`` in a child process with its own data dir."""

    def __init__(
        self,
        home: Path,
        *,
        port: int | None = None,
        env: Mapping[str, str] | None = None,
        file_size_limit: int | None = None,
        args: Sequence[str] = (),
        advertised: bool = False,
    ) -> None:
        self.home = Path(home)
        self.port = port or free_port()
        self._port_drawn = port is None  # a port of our own drawing may be drawn again (see start)
        self.env = {**_hermetic(os.environ, self.home), "MODELROUTER_LOG_JSON": "true", **(env or {})}
        self.args = list(args)  # a llama-server command line (``--models-dir``, ``-hf``, ``--api-key``...)
        # A cluster node: ``--advertise-url`` follows the port, drawn again if it was taken (see start).
        self.advertised = advertised
        self.file_size_limit = file_size_limit  # RLIMIT_FSIZE, inherited by the workers (disk-full tests)
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = self.home / f"service-{self.port}.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self, timeout: float = 30.0) -> ServiceProcess:
        """Start and wait for ``/health``. A port this object drew itself that another process took
        between the draw and the service's bind (a worker of another service given the same free port)
        is drawn again, at the first start only: a restart keeps the address its callers know."""
        if self.proc is not None and self.proc.poll() is None:
            # A second start would answer from the first process and leave it running past stop().
            msg = f"the service on port {self.port} is running already (pid {self.proc.pid})"
            raise RuntimeError(msg)
        redraws = 3 if self._port_drawn and self.proc is None else 0
        while True:
            try:
                return self._start_once(timeout)
            except PortTaken:
                if redraws == 0:
                    raise
                redraws -= 1
                self.port = free_port()
                self.log_path = self.home / f"service-{self.port}.log"

    def _start_once(self, timeout: float) -> ServiceProcess:
        self.home.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("ab")
        cmd = [
            sys.executable,
            "-m",
            "service.cli",
            "serve",
            *self.args,
            *(["--advertise-url", self.url] if self.advertised else []),
            "--home",
            str(self.home),
            "--port",
            str(self.port),
        ]
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=self.env, start_new_session=True)
        try:
            if self.file_size_limit is not None:
                # Set on the running child, not in preexec_fn (unsafe in a threaded parent); it is
                # in place before /health answers, so every worker spawned for a request inherits it.
                resource.prlimit(self.proc.pid, resource.RLIMIT_FSIZE, (self.file_size_limit, self.file_size_limit))
            self.wait_healthy(timeout)
        except BaseException:
            self.kill9()  # never leak a half-started service
            raise
        return self

    def wait_healthy(self, timeout: float = 30.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        with httpx.Client(timeout=1.0) as client:  # one client: a new one per poll costs ~50 ms of CPU
            while time.monotonic() < deadline:
                assert self.proc is not None
                if self.proc.poll() is not None:
                    log = self.log_text()[-4000:]
                    msg = f"service exited with {self.proc.returncode}; log:\n{log}"
                    raise PortTaken(msg) if _BIND_REFUSED in log else RuntimeError(msg)
                try:
                    answer = client.get(f"{self.url}/health")
                    # Another process may hold the port (drawn by it between our draw and our bind):
                    # its answer is not ours, and our service is about to say it couldn't bind.
                    if answer.status_code == 200 and _listens(self.proc.pid, self.port):
                        return dict(answer.json())
                except httpx.HTTPError:
                    pass
                time.sleep(0.05)
        msg = f"service not healthy after {timeout}s; log:\n{self.log_text()[-4000:]}"
        raise TimeoutError(msg)

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self, timeout: float = 20.0) -> int | None:
        """SIGTERM and wait (graceful shutdown)."""
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()

    def kill9(self) -> None:
        """SIGKILL: the crash the recovery tests are about."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def __enter__(self) -> ServiceProcess:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()
