"""Embeddings and rerank: the inference worker's batch engine against llama-server, same files, one run.

The models are generated (``devtools.tiny_gguf.write_tiny_bert``) at the size of
all-MiniLM-L6 (6 layers, 384 wide, 12 heads, f32): random weights, the same
arithmetic per token. Both servers get the same flags (``--embedding``
``-np 4 -c 2048 -b 512 -ub 512``, one thread count), and ``--reranking`` for
the reranker. Both servers of a case stay up for all its rounds, and each
round is measured in short slices that alternate between them (``--slices``,
the first target alternating too): this VM's speed drifts by ±20 % over
seconds, and a round of 4 s on one server then 4 s on the other compared two
different machines. Measured:

* embeddings per second with one input per request (sequential requests);
* embeddings per second with 32 inputs per request;
* rerank latency: one ``/v1/rerank`` of a query over 8 documents (mean of the round's).

Reported as modelrouter / llama-server ratios per round and their median
(> 1: modelrouter is faster; for latency, llama-server's time / ours).

    python bench/embeddings.py [--llama-server PATH] [--rounds 3] [--threads 2]

``--llama-server`` defaults to ``python -m devtools.llama_build llama-server``
(built from the llama.cpp llama-cpp-python vendors, with the wheel's flags).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from devtools.tiny_gguf import write_tiny_bert
from service.supervision.ports import free_port

ROOT = Path(__file__).resolve().parents[1]
SENTENCE = "the quick brown fox jumps over the lazy dog number {i}"
Slice = Callable[[httpx.Client], tuple[float, float]]  # (things done, seconds)
COMMON = ["-np", "4", "-c", "2048", "-b", "512"]


class Server:
    """A started server: its process and base URL, ready when ``/health`` answers 200."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, **env}
        )
        self.base = f"http://127.0.0.1:{argv[argv.index('--port') + 1]}"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{argv[0]} exited ({self.proc.returncode})")
            try:
                if httpx.get(f"{self.base}/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"{argv[0]} not ready in 120 s")

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


def _ours(model: Path, flags: list[str], threads: int) -> Server:
    port = str(free_port())
    argv = [
        sys.executable,
        "-m",
        "workers.inference",
        "--model-path",
        str(model),
        "--model-name",
        "bench",
        "--port",
        port,
        "--events",
        os.devnull,
        "--n-threads",
        str(threads),
        *COMMON,
        *flags,
    ]
    return Server(argv, {"PYTHONPATH": str(ROOT)})


def _theirs(binary: str, model: Path, flags: list[str], threads: int) -> Server:
    port = str(free_port())
    argv = [
        binary,
        "-m",
        str(model),
        "--host",
        "127.0.0.1",
        "--port",
        port,
        "--alias",
        "bench",
        "-t",
        str(threads),
        "-ub",
        "512",
        *COMMON,
        *flags,
    ]
    return Server(argv, {})


def _embeddings(client: httpx.Client, batch: int, seconds: float) -> tuple[float, float]:
    """Sequential requests of ``batch`` inputs for ``seconds``: (embeddings, elapsed seconds)."""
    done, n = 0, 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        inputs = [SENTENCE.format(i=n + k) for k in range(batch)]
        r = client.post("/v1/embeddings", json={"model": "bench", "input": inputs})
        r.raise_for_status()
        done += len(r.json()["data"])
        n += batch
    return done, time.perf_counter() - t0


def _rerank(client: httpx.Client, repeats: int) -> tuple[float, float]:
    """``repeats`` reranks of a query over 8 documents, one at a time: (reranks, seconds)."""
    docs = [SENTENCE.format(i=k) for k in range(8)]
    total = 0.0
    for i in range(repeats):
        t0 = time.perf_counter()
        r = client.post("/v1/rerank", json={"model": "bench", "query": f"which fox {i}", "documents": docs})
        r.raise_for_status()
        total += time.perf_counter() - t0
    return repeats, total


def _default_binary() -> str:
    out = subprocess.run(
        [sys.executable, "-m", "devtools.llama_build", "llama-server"],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    return out.stdout.strip().splitlines()[-1]


def _round(clients: dict[str, httpx.Client], what: Slice, slices: int, first: int) -> dict[str, float]:
    """One round: ``slices`` alternating slices per target; each target's rate (things per second)."""
    done = {who: 0.0 for who in clients}
    spent = {who: 0.0 for who in clients}
    names = list(clients)
    for k in range(slices):
        for who in names[(first + k) % 2 :] + names[: (first + k) % 2]:
            n, dt = what(clients[who])
            done[who] += n
            spent[who] += dt
    return {who: done[who] / spent[who] for who in clients}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--llama-server", default=None)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seconds", type=float, default=4.0, help="per target and round (throughput rows)")
    p.add_argument("--slices", type=int, default=8, help="alternating slices per round")
    args = p.parse_args(argv)
    binary = args.llama_server or _default_binary()
    tmp = Path(tempfile.mkdtemp(prefix="bench-embeddings-"))
    size = {"n_layer": 6, "n_embd": 384, "n_head": 12, "n_ff": 1536, "n_ctx": 512}
    embed = write_tiny_bert(tmp / "minilm-sized.gguf", **size)
    rank = write_tiny_bert(tmp / "minilm-sized-rank.gguf", pooling="rank", **size)
    t = args.threads
    slice_s = args.seconds / args.slices
    cases: dict[str, tuple[Path, list[str], Slice, bool]] = {
        "embeddings/s, batch 1": (embed, ["--embedding"], lambda c: _embeddings(c, 1, slice_s), True),
        "embeddings/s, batch 32": (embed, ["--embedding"], lambda c: _embeddings(c, 32, slice_s), True),
        "rerank latency (ms), 8 documents": (
            rank,
            ["--reranking"],
            lambda c: _rerank(c, 40 // args.slices or 1),
            False,
        ),
    }
    results: dict[str, dict[str, list[float]]] = {name: {"modelrouter": [], "llama-server": []} for name in cases}
    for name, (model, flags, what, higher) in cases.items():
        servers = {"modelrouter": _ours(model, flags, t), "llama-server": _theirs(binary, model, flags, t)}
        clients = {who: httpx.Client(base_url=srv.base, timeout=120) for who, srv in servers.items()}
        try:
            _round(clients, what, 1, 0)  # warm-up
            for rnd in range(args.rounds):
                rates = _round(clients, what, args.slices, rnd)
                for who, rate in rates.items():  # latency rows: milliseconds per rerank
                    results[name][who].append(rate if higher else 1000.0 / rate)
        finally:
            for client in clients.values():
                client.close()
            for srv in servers.values():
                srv.stop()
    report = {}
    for name, (_m, _f, _w, higher) in cases.items():
        ours, theirs = results[name]["modelrouter"], results[name]["llama-server"]
        ratios = [(o / x if higher else x / o) for o, x in zip(ours, theirs, strict=True)]
        report[name] = {
            "modelrouter": [round(v, 2) for v in ours],
            "llama-server": [round(v, 2) for v in theirs],
            "ratio_per_round": [round(r, 3) for r in ratios],
            "median_ratio": round(statistics.median(ratios), 3),
        }
    print(json.dumps({"threads": t, "rounds": args.rounds, "cases": report}, indent=2))


if __name__ == "__main__":
    main()
