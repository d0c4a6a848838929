"""Download throughput: modelrouter vs ``hf_hub_download`` vs a plain streamed GET.

All three fetch the same file from the project's Hub server on 127.0.0.1 in one
run. modelrouter's time runs from ``POST /models`` to ``download_finished`` and so
includes resolution, spawning the worker, sha256 verification and fsync;
``hf_hub_download`` checks sizes only; the plain GET writes bytes and nothing else.

    python bench/download.py [--size-mb 1024] [--rounds 2]

On the project's VMs the cost of putting 1 GiB into the page cache varies
between runs (~0.2 s to ~1.5 s, depending on whether freed memory was already
handed back to the host), for every method alike: read the per-round times
next to the medians, and prefer more rounds.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from devtools.hub_repos import make_repo
from devtools.hub_server import HubServer
from devtools.service_process import ServiceProcess
from service.event_store.codec import parse_time

FILE = "bench-Q4_K_M.gguf"


def _plain_get(url: str, dest: Path) -> float:
    """The baseline: bytes from the socket to a file, nothing else (no hashing, no fsync).

    ``iter_raw()`` without a chunk size hands over each received chunk as is:
    ``iter_bytes(n)`` re-chunks with copies and was ~20% slower. Each chunk is
    bigger than the file's buffer, so ``write`` goes straight to the kernel.
    """
    started = time.perf_counter()
    with httpx.stream("GET", url, timeout=60, headers={"Accept-Encoding": "identity"}) as answer:
        answer.raise_for_status()
        with dest.open("wb") as out:
            for chunk in answer.iter_raw():
                out.write(chunk)
    return time.perf_counter() - started


def _hf(endpoint: str, repo: str, cache: Path) -> float:
    from huggingface_hub import hf_hub_download

    started = time.perf_counter()
    hf_hub_download(repo, FILE, cache_dir=str(cache), endpoint=endpoint)
    return time.perf_counter() - started


def _modelrouter(svc: ServiceProcess, repo: str, phases: dict[str, list[float]]) -> float:
    """Seconds from ``POST /models`` until the service reports the job finished; adds its phases to ``phases``.

    Waits on ``/events/stream`` rather than polling: a poll loop every 5 ms
    (a new httpx client per request) burned ~75% of a core, taken from the
    worker on a 2-core machine.
    """
    posted, started = time.time(), time.perf_counter()
    with httpx.Client(base_url=svc.url, timeout=60) as client:
        answer = client.post("/models", json={"model": repo})
        answer.raise_for_status()
        job_id = answer.json()["job_id"]
        outcome = _wait_outcome(client, job_id)
        elapsed = time.perf_counter() - started
        if outcome["type"] != "download_finished":
            raise RuntimeError(outcome)
        job = client.get(f"/downloads/{job_id}").json()
    at = {k: parse_time(job[k]).timestamp() for k in ("requested_at", "started_at", "finished_at")}
    for name, seconds in (
        ("resolve (POST -> requested)", at["requested_at"] - posted),
        ("worker start (-> started)", at["started_at"] - at["requested_at"]),
        ("transfer+sha256+fsync", at["finished_at"] - at["started_at"]),
        ("until seen finished", posted + elapsed - at["finished_at"]),
    ):
        phases.setdefault(name, []).append(seconds)
    return elapsed


def _wait_outcome(client: httpx.Client, job_id: str) -> dict[str, Any]:
    """The job's outcome event, from the SSE stream replayed from the start (so none is missed)."""
    params: dict[str, str | list[str]] = {
        "after": "0",
        "type": ["download_finished", "download_failed", "download_cancelled"],
    }
    with client.stream("GET", "/events/stream", params=params, timeout=httpx.Timeout(60, read=120)) as stream:
        for line in stream.iter_lines():
            if line.startswith("data:"):
                event: dict[str, Any] = json.loads(line[5:])
                if event["data"].get("job_id") == job_id:
                    return event
    raise RuntimeError(f"event stream ended before job {job_id} did")


def _leg(name: str, out: Path, endpoint: str, repo: str, phases: dict[str, list[float]]) -> float:
    """Time one method; its output is deleted right after, so every leg starts with the same free memory."""
    try:
        if name == "plain GET":
            out.mkdir(parents=True, exist_ok=True)
            return _plain_get(f"{endpoint}/{repo}/resolve/main/{FILE}", out / "plain.bin")
        if name == "hf_hub_download":
            return _hf(endpoint, repo, out / "hf")
        # The service's own start-up is not timed: it runs before anyone asks for a model.
        with ServiceProcess(out / "mr", env={"HF_ENDPOINT": endpoint}) as svc:
            return _modelrouter(svc, repo, phases)
    finally:
        shutil.rmtree(out, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size-mb", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    size = args.size_mb * 1024 * 1024
    results: dict[str, list[float]] = {"plain GET": [], "hf_hub_download": [], "modelrouter": []}
    phases: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        with HubServer.start(tmp / "hub-root") as hub:
            for round_ in range(args.rounds):
                repo = f"bench/model-{round_}-GGUF"
                make_repo(hub.root, repo, {FILE: size})
                # Rotate the order each round: no method always runs first after the
                # source file was written (its writeback is still to come).
                names = list(results)
                for name in names[round_ % 3 :] + names[: round_ % 3]:
                    results[name].append(_leg(name, tmp / f"{round_}", hub.url, repo, phases))
                shutil.rmtree(hub.root / "bench" / f"model-{round_}-GGUF", ignore_errors=True)
    base = statistics.median(results["plain GET"])
    print(f"file: {args.size_mb} MiB, {args.rounds} rounds (median)")
    print(f"{'method':<16} {'seconds':>8} {'MB/s':>8} {'vs plain GET':>13}   rounds (s)")
    for name, times in results.items():
        t = statistics.median(times)
        rounds = " ".join(f"{x:.2f}" for x in times)
        print(f"{name:<16} {t:>8.2f} {size / t / 1e6:>8.0f} {base / t:>13.2f}   {rounds}")
    print("modelrouter phases (median s): " + ", ".join(f"{k} {statistics.median(v):.2f}" for k, v in phases.items()))


if __name__ == "__main__":
    main()
