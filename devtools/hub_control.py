"""Start, steer and stop the fake Hub (:mod:`devtools.hub_server`) as a subprocess.

Why a subprocess and not a thread: the server must keep serving while a test
SIGKILLs or SIGSTOPs the download worker, its byte counters must be exact
under load, and benchmarks must not share a GIL with the code they measure.

    with HubServer.start(tmp_path / "hub") as hub:
        make_repo(hub.root, "alice/tiny", {"m-Q4_K_M.gguf": 1 << 20})
        hub.set_faults({"kind": "drop", "path": "m-Q4_K_M.gguf", "at_fraction": 0.4})
        ...  # point HF_ENDPOINT / HfApi(endpoint=hub.url) at it
        hub.stats()["bytes_served"]["alice/tiny/m-Q4_K_M.gguf"]
"""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx

_PROJECT_ROOT = Path(__file__).resolve().parents[1]


class HubServer:
    """Handle on a running hub server process. Use :meth:`start`; stop with :meth:`stop` or ``with``."""

    def __init__(self, process: subprocess.Popen[bytes], root: Path, host: str, port: int) -> None:
        self.process = process
        self.root = root
        self.host = host
        self.port = port
        self.url = f"http://{host}:{port}"
        # trust_env=False: a proxy configured in the environment must never see test traffic to localhost.
        self._client = httpx.Client(base_url=self.url, timeout=10.0, trust_env=False)

    @classmethod
    def start(
        cls, root: str | Path, *, host: str = "127.0.0.1", port: int = 0, timeout: float = 15.0, verbose: bool = False
    ) -> HubServer:
        """Spawn the server on ``root`` and wait until it announced its port."""
        root = Path(root)
        root.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(_PROJECT_ROOT), env.get("PYTHONPATH")]))
        cmd = [
            sys.executable,
            "-m",
            "devtools.hub_server",
            "--root",
            str(root),
            "--port",
            str(port),
            "--host",
            host,
        ] + (["--verbose"] if verbose else [])
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, cwd=_PROJECT_ROOT, env=env)
        assert proc.stdout is not None
        line = b""
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ)
            deadline = time.monotonic() + timeout
            while not line.endswith(b"\n"):
                left = deadline - time.monotonic()
                if left <= 0 or not sel.select(left):
                    proc.kill()
                    raise RuntimeError(f"hub server did not announce its port within {timeout}s")
                chunk = os.read(proc.stdout.fileno(), 4096)
                if not chunk:
                    raise RuntimeError(f"hub server exited early with code {proc.wait()}")
                line += chunk
        announced = json.loads(line.decode().splitlines()[0])
        return cls(proc, root, host, int(announced["port"]))

    # --- control -------------------------------------------------------

    def set_faults(self, *faults: Mapping[str, Any], replace: bool = True) -> list[dict[str, Any]]:
        """Arm faults (see :mod:`devtools.hub_faults`); replaces the current list by default."""
        r = self._client.post("/_control/faults", json={"faults": list(faults), "replace": replace})
        r.raise_for_status()
        return list(r.json()["faults"])

    def add_faults(self, *faults: Mapping[str, Any]) -> list[dict[str, Any]]:
        return self.set_faults(*faults, replace=False)

    def clear_faults(self) -> None:
        self.set_faults()

    def faults(self) -> list[dict[str, Any]]:
        return list(self._client.get("/_control/faults").json()["faults"])

    def stats(self) -> dict[str, Any]:
        """``bytes_served`` {"user/repo/path": n}, ``total_bytes_served``, ``get_requests``,
        ``requests`` (last 1000: method, file, range, status) and ``faults``."""
        r = self._client.get("/_control/stats")
        r.raise_for_status()
        return dict(r.json())

    def bytes_served(self, repo_id: str, path: str) -> int:
        return int(self.stats()["bytes_served"].get(f"{repo_id}/{path}", 0))

    def reset_stats(self) -> None:
        self._client.post("/_control/reset_stats").raise_for_status()

    def reset(self) -> None:
        """Clear faults and stats and release stalled responses (between tests)."""
        self._client.post("/_control/reset").raise_for_status()

    # --- lifecycle -----------------------------------------------------

    def stop(self, timeout: float = 5.0) -> None:
        """SIGTERM, then SIGKILL after ``timeout``; idempotent."""
        self._client.close()
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()

    def __enter__(self) -> HubServer:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
