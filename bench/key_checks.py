"""The added cost of a named key's checks per request (issue 34): the key lookup, the expiry and
endpoint rule, the rate limits and the model scope, against no keys at all, in one run.

Two measurements, each alternating the configurations request by request so machine noise hits
them alike:

1. **in-process** (the goal's figure): the real key middleware (``service.api.auth``) with the real
   rate gate (``service.api.rate_gate``, its window holding ``--window-uses`` recent uses) and the
   real model-scope check (``service.api.scopes.require_model`` over a fold of ``--models`` models),
   around an ASGI app that answers at once. Configurations: no keys (llama-server's open mode), a
   full key, and a named key with model globs, ``rpm`` and ``tpm``.
2. **through a real service** (informative: the HTTP hop's noise is larger than the checks): two
   ``modelrouter serve`` processes on a tiny model, one open, one with ``--api-key`` and a named key;
   ``POST /tokenize`` through each.

    python bench/key_checks.py              # both
    python bench/key_checks.py --no-http    # the in-process figure only

Prints p50/p95 per configuration, the added p50 of the named key against no keys, the goal
(<= 0.2 ms at p50), the CPU and the load average.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from devtools.service_process import ServiceProcess
from devtools.tiny_gguf import write_tiny_gguf
from service.api.auth import api_key_middleware
from service.api.principal import principal_of
from service.api.rate_gate import RateGate
from service.api.scopes import require_model
from service.core import events as ev
from service.core.fold import fold
from service.core.keys import KeyScope, NamedKey, digest_secret
from service.core.state import RouterState

GOAL_MS = 0.2
_FULL = "sk-full-bench-0123456789"
_SALT = "00" * 16
_SECRET = "mr-0123456789ab-" + "x" * 43


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _state(models: int) -> RouterState:
    """A fold with ``models`` models (a models dir's), so the scope check resolves real entries."""
    state = RouterState()
    for i in range(models):
        name = f"team/model-{i}" if i % 2 else f"other/model-{i}"
        found = ev.ModelDiscovered(path=f"/m/{i}.gguf", files=(ev.FileRef(path=f"/m/{i}.gguf", size=1),), size=1)
        state = fold(state, ev.Recorded(i + 1, f"e{i}", name, found, {"kind": "router"}, datetime.now(UTC)))
    return state


def _named(state: RouterState) -> dict[str, NamedKey]:
    scope = KeyScope(models=("team/*", "shared-*"), endpoints=("inference",), rpm=10**9, tpm=10**12)
    keys = {
        f"other-{i}": NamedKey(f"other-{i}", f"{i:012x}", _SALT, "ab" * 32, scope, datetime.now(UTC))
        for i in range(1, 20)
    }
    keys["bench"] = NamedKey("bench", "0123456789ab", _SALT, digest_secret(_SALT, _SECRET), scope, datetime.now(UTC))
    return keys


def _completed(at: float) -> ev.Recorded:
    """A recent request of the bench key, as another node would have recorded it."""
    done = ev.RequestCompleted(
        instance_id="i",
        route="/v1/chat/completions",
        status_code=200,
        duration_ms=5.0,
        key="bench",
        prompt_tokens=40,
        completion_tokens=10,
    )
    return ev.Recorded(
        1, "e", "team/model-1", done, {"kind": "router", "node": "other"}, datetime.fromtimestamp(at, UTC)
    )


class _Inner:
    """The app behind the middleware: the scope check a handler makes, then an empty 200."""

    def __init__(self, state: RouterState, model: str) -> None:
        self.state, self.model = state, model

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:  # Any: ASGI's own types
        require_model(principal_of(scope), self.state, self.model, scope["path"])
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"", "more_body": False})


async def _in_process(n: int, models: int, window_uses: int) -> dict[str, list[float]]:
    state = _state(models)
    keys = _named(state)
    gate = RateGate(None)
    now = time.time()
    for i in range(window_uses):  # a busy key: its window holds this many recent uses
        gate.on_folded(_completed(now - 30 + i * 30 / max(window_uses, 1)), state)
    inner = _Inner(state, "team/model-1")
    apps = {
        "no keys": api_key_middleware((), dict, lambda: datetime.now(UTC))(inner),
        "full key": api_key_middleware((_FULL,), lambda: keys, lambda: datetime.now(UTC), gate.admit_request)(inner),
        "named key": api_key_middleware((_FULL,), lambda: keys, lambda: datetime.now(UTC), gate.admit_request)(inner),
    }
    headers = {
        "no keys": [],
        "full key": [(b"authorization", f"Bearer {_FULL}".encode())],
        "named key": [(b"authorization", f"Bearer {_SECRET}".encode())],
    }
    statuses: list[int] = []

    async def send(message: Any) -> None:  # Any: an ASGI message
        if message["type"] == "http.response.start":
            statuses.append(message["status"])

    async def receive() -> Any:  # Any: an ASGI message
        return {"type": "http.request", "body": b"", "more_body": False}

    times: dict[str, list[float]] = {name: [] for name in apps}
    for round_ in range(n + 200):
        for name, app in apps.items():
            scope = {
                "type": "http",
                "method": "POST",
                "path": "/v1/chat/completions",
                "headers": headers[name],
                "query_string": b"",
            }
            started = time.perf_counter_ns()
            await app(scope, receive, send)
            if round_ >= 200:  # warm-up rounds are not counted
                times[name].append((time.perf_counter_ns() - started) / 1e6)
    if set(statuses) != {200}:
        raise SystemExit(f"a check refused a bench request: statuses {sorted(set(statuses))}")
    return times


def _http(n: int) -> dict[str, list[float]]:
    work = Path(tempfile.mkdtemp(prefix="bench-keys-"))
    models = work / "models"
    models.mkdir()
    write_tiny_gguf(models / "tiny.gguf")
    env = {"MODELROUTER_MODELS_DIR": str(models)}
    full_file = work / "key.txt"
    full_file.write_text(_FULL + "\n")
    open_svc = ServiceProcess(work / "open", env=env).start()
    keyed = ServiceProcess(work / "keyed", env=env, args=["--api-key-file", str(full_file)]).start()
    try:
        admin = {"Authorization": f"Bearer {_FULL}"}
        with httpx.Client(timeout=120) as client:
            made = client.post(
                f"{keyed.url}/keys",
                json={"name": "bench", "models": ["tiny*"], "rpm": 10**9, "tpm": 10**12},
                headers=admin,
            )
            made.raise_for_status()
            named = {"Authorization": f"Bearer {made.json()['secret']}"}
            targets = {"no keys": (open_svc.url, {}), "named key": (keyed.url, named)}
            for base, head in targets.values():
                client.post(f"{base}/models/load", json={"model": "tiny"}, headers=head or admin).raise_for_status()
            body = {"model": "tiny", "content": "The sea is calm tonight"}
            times: dict[str, list[float]] = {name: [] for name in targets}
            for round_ in range(n + 20):
                for name, (base, head) in targets.items():
                    started = time.perf_counter_ns()
                    client.post(f"{base}/tokenize", json=body, headers=head).raise_for_status()
                    if round_ >= 20:
                        times[name].append((time.perf_counter_ns() - started) / 1e6)
            return times
    finally:
        open_svc.stop()
        keyed.stop()


def _report(title: str, times: dict[str, list[float]]) -> float:
    print(f"\n{title}")
    print(f"{'configuration':<12} {'n':>6} {'p50 ms':>9} {'p95 ms':>9}")
    for name, values in times.items():
        print(f"{name:<12} {len(values):>6} {_pct(values, 0.5):>9.4f} {_pct(values, 0.95):>9.4f}")
    added = _pct(times["named key"], 0.5) - _pct(times["no keys"], 0.5)
    print(f"added p50, named key vs no keys: {added * 1000:.1f} us")
    return added


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", type=int, default=20000, help="in-process requests per configuration")
    parser.add_argument("--http-n", type=int, default=400, help="HTTP requests per configuration")
    parser.add_argument("--models", type=int, default=200, help="models in the fold")
    parser.add_argument("--window-uses", type=int, default=1000, help="recent uses in the key's rate window")
    parser.add_argument("--no-http", action="store_true", help="skip the measurement through real services")
    args = parser.parse_args()
    print(f"CPU: {_cpu()} ({os.cpu_count()} logical), load average {os.getloadavg()}")
    added = _report(
        f"in-process: middleware + rate gate ({args.window_uses} uses) + model scope ({args.models} models)",
        asyncio.run(_in_process(args.n, args.models, args.window_uses)),
    )
    verdict = "met" if added <= GOAL_MS else "NOT met"
    print(f"goal: added p50 <= {GOAL_MS} ms: {verdict}")
    if not args.no_http:
        _report("through real services: POST /tokenize on a tiny model", _http(args.http_n))
    print(f"load average after: {os.getloadavg()}")
    return 0 if added <= GOAL_MS else 1


if __name__ == "__main__":
    sys.exit(main())
