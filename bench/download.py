"""Download throughput: modelrouter vs ``hf_hub_download`` vs a plain streamed GET.

All three fetch the same file from the project's Hub server on 127.0.0.1 in one
run. modelrouter's time runs from ``POST /models`` to ``download_finished`` and so
includes resolution, spawning the worker, sha256 verification and fsync;
``hf_hub_download`` checks sizes only; the plain GET writes bytes and nothing else.

    python bench/download.py [--size-mb 1024] [--rounds 2]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from service.devtools.hub_repos import make_repo  # noqa: E402
from service.devtools.hub_server import HubServer  # noqa: E402
from service.devtools.service_process import ServiceProcess  # noqa: E402

FILE = "bench-Q4_K_M.gguf"


def _plain_get(url: str, dest: Path) -> float:
    started = time.perf_counter()
    with httpx.stream("GET", url, timeout=60) as answer, dest.open("wb") as out:
        answer.raise_for_status()
        for chunk in answer.iter_bytes(1 << 20):
            out.write(chunk)
    return time.perf_counter() - started


def _hf(endpoint: str, repo: str, cache: Path) -> float:
    from huggingface_hub import hf_hub_download

    started = time.perf_counter()
    hf_hub_download(repo, FILE, cache_dir=str(cache), endpoint=endpoint)
    return time.perf_counter() - started


def _modelrouter(svc: ServiceProcess, repo: str) -> float:
    started = time.perf_counter()
    answer = httpx.post(f"{svc.url}/models", json={"model": repo}, timeout=60)
    answer.raise_for_status()
    job_id = answer.json()["job_id"]
    while True:
        job = httpx.get(f"{svc.url}/downloads/{job_id}", timeout=10).json()
        if job["status"] == "finished":
            return time.perf_counter() - started
        if job["status"] not in {"queued", "running"}:
            raise RuntimeError(job)
        time.sleep(0.005)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size-mb", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    size = args.size_mb * 1024 * 1024
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        results: dict[str, list[float]] = {"plain GET": [], "hf_hub_download": [], "modelrouter": []}
        with HubServer.start(tmp / "hub-root") as hub:
            for round_ in range(args.rounds):
                repo = f"bench/model-{round_}-GGUF"
                make_repo(hub.root, repo, {FILE: size})
                url = f"{hub.url}/{repo}/resolve/main/{FILE}"
                results["plain GET"].append(_plain_get(url, tmp / "plain.bin"))
                (tmp / "plain.bin").unlink()
                results["hf_hub_download"].append(_hf(hub.url, repo, tmp / f"hf-{round_}"))
                shutil.rmtree(tmp / f"hf-{round_}")
                with ServiceProcess(tmp / f"mr-{round_}", env={"HF_ENDPOINT": hub.url}) as svc:
                    results["modelrouter"].append(_modelrouter(svc, repo))
                shutil.rmtree(tmp / f"mr-{round_}")
                shutil.rmtree(hub.root / "bench" / f"model-{round_}-GGUF", ignore_errors=True)
    base = statistics.median(results["plain GET"])
    print(f"file: {args.size_mb} MiB, {args.rounds} rounds (median)")
    print(f"{'method':<16} {'seconds':>8} {'MB/s':>8} {'vs plain GET':>13}")
    for name, times in results.items():
        t = statistics.median(times)
        print(f"{name:<16} {t:>8.2f} {size / t / 1e6:>8.0f} {base / t:>13.2f}")


if __name__ == "__main__":
    main()
