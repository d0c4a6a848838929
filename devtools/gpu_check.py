"""``make gpu-check``: the GPU path end to end on a machine with an NVIDIA GPU and nvcc, offline.

1. builds, at once: the CUDA wheel of llama-cpp-python from the sdist (``MODELROUTER_LLAMA_BACKEND=cuda``,
   ``devtools/llama_build.py``), llama-server with CUDA from the same sources, and a ~1B random-weight GGUF
   written by the project's own generator (``devtools/tiny_gguf.py``) in a separate venv, ``.venv-gpu`` (no
   system site-packages: the machine's own torch and friends stay out);
2. installs the wheel and the project there, and runs ``llama_build check`` (a CUDA device, offload on);
3. runs ``tests/gpu`` there on that model;
4. runs ``bench/engine.py``: modelrouter against that llama-server, ``-ngl 99`` both, one stream and four,
   and prints the ratios (goal: >= 0.95x llama-server).

Where no NVIDIA GPU answers or nvcc is missing it prints ``no GPU: <why>`` and exits 0.

Offline (a lent GPU machine reaches no network): ``python -m devtools.gpu_check pack`` run where pip works
writes ``.gpu-carry/``: the sdist trimmed of what no build reads (llama.cpp's test models, docs, web UI
sources) and the wheels the project needs for Python 3.12 on manylinux x86-64, under 60 MiB together. Then
``python3 -m devtools.gpu_check --carry .gpu-carry`` there builds and installs from it alone (docs/operations.md).

Standard library only: it runs before anything is installed.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import subprocess
import sys
import tarfile
import tomllib
import venv
from collections.abc import Sequence
from pathlib import Path

from devtools import llama_build
from devtools.llama_backend import gather_facts

ROOT = Path(__file__).resolve().parents[1]
VENV = ROOT / ".venv-gpu"
CARRY_LIMIT = 60 * 2**20
# About 1.03B parameters: 20 llama layers of 2048 wide, SwiGLU 5632 (TinyLlama's shape), f16 (2 GB).
MODEL_SHAPE = {"n_layer": 20, "n_embd": 2048, "n_head": 16, "n_ff": 5632, "n_ctx": 4096}
TEST_TOOLS = ("pytest", "pytest-asyncio", "pytest-timeout", "setuptools")
# What neither the wheel nor llama-server (tests, examples off) reads: llama-cpp-python's git metadata (38 MB
# of the vendored repository's history), docs and examples, and under vendor/llama.cpp the test models,
# docs, web UI sources and the ggml backends no choice in devtools/llama_backend.py builds.
TRIMMED_TOP = (".git/", "docs/", "examples/", "tests/")
_BACKENDS_UNBUILT = ("cann", "et", "hexagon", "opencl", "openvino", "sycl", "virtgpu", "webgpu", "zdnn", "zendnn")
TRIMMED = (
    *(f"ggml/src/ggml-{name}/" for name in _BACKENDS_UNBUILT),
    "models/",
    "docs/",
    "media/",
    "benches/",
    "examples/",
    "pocs/",
    "tests/",
    "gguf-py/",
    "conversion/",
    "tools/ui/src/",
    "tools/ui/tests/",
    "tools/server/tests/",
    ".git",  # the vendored repository's gitlink and .github/
)


def _why_no_gpu() -> str | None:
    facts = gather_facts()
    if not facts.nvidia_gpus:
        return "no NVIDIA GPU answers nvidia-smi; nothing to check here (tests/gpu skip on this machine)"
    if not facts.nvcc:
        return f"an NVIDIA GPU but no nvcc on PATH nor under {facts.cuda_home}/bin: install the CUDA toolkit"
    return None


def _requirements() -> list[str]:
    """The project's dependencies but llama-cpp-python (built here), llama-cpp-python's own, the test tools."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    ours = [d for d in project if not d.replace(" ", "").startswith(f"{llama_build.PACKAGE}==")]
    return [*ours, "typing-extensions>=4.5.0", "diskcache>=5.6.1", "jinja2>=2.11.3", *TEST_TOOLS]


def _run(cmd: Sequence[str | Path], env: dict[str, str] | None = None) -> None:
    print("+", " ".join(str(c) for c in cmd), flush=True)
    subprocess.run([str(c) for c in cmd], check=True, cwd=ROOT, env=env)


def _pip(carry: Path | None) -> list[str]:
    return [str(VENV / "bin" / "python"), "-m", "pip", "install", "-q", *_offline(carry)]


def _offline(carry: Path | None) -> list[str]:
    return ["--no-index", "--find-links", str(carry / "wheels")] if carry else []


def _write_model(path: Path) -> Path:
    if not path.exists():
        code = (
            "import sys, json; from devtools.tiny_gguf import write_tiny_gguf; "
            "write_tiny_gguf(sys.argv[1], name='gpu-check-1b', **json.loads(sys.argv[2]))"
        )
        _run([VENV / "bin" / "python", "-c", code, path.with_suffix(".part"), json.dumps(MODEL_SHAPE)])
        path.with_suffix(".part").replace(path)
    return path


def _build(carry: Path | None) -> tuple[Path, Path, Path]:
    """The CUDA wheelhouse, llama-server and the model, built side by side (nvcc keeps the cores busy; the
    model's writer is one more thread)."""
    os.environ["MODELROUTER_LLAMA_BACKEND"] = "cuda"
    if carry:
        os.environ["MODELROUTER_LLAMA_SDIST"] = str(next(carry.glob("llama_cpp_python-*.tar.gz")))
    print(llama_build.choice().line(), flush=True)
    model = llama_build.cache_root() / "gpu-check-1b.gguf"
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        house = pool.submit(llama_build.wheelhouse)
        server = pool.submit(llama_build.llama_server)
        written = pool.submit(_write_model, model)
        return house.result(), server.result(), written.result()


def run(carry: Path | None, rounds: int) -> int:
    """The whole check; 0 when the build, the check and tests/gpu pass (the benchmark only reports)."""
    why = _why_no_gpu()
    if why:
        print(f"no GPU: {why}")
        return 0
    if not (VENV / "bin" / "python").exists():
        venv.EnvBuilder(with_pip=True, system_site_packages=False).create(VENV)
    _run([*_pip(carry), *_requirements()])
    house, server, model = _build(carry)
    _run([*_pip(carry), "--no-deps", "--force-reinstall", "--find-links", house, llama_build.PACKAGE])
    _run([*_pip(carry), "--no-deps", "--no-build-isolation", "-e", "."])
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MODELROUTER_GPU_MODEL": str(model)}
    python = VENV / "bin" / "python"
    _run([python, "-m", "devtools.llama_build", "check"], env)
    _run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", "tests/gpu"], env)
    bench: list[str | Path] = [
        "bench/engine.py",
        "--model",
        model,
        "--llama-server",
        server,
        "--targets",
        "batch,llama-server",
    ]
    bench += ["--gpu-layers", "99", "--measures", "one,agg4", "--serving-only", "--rounds", str(rounds)]
    _run([python, *bench], env)
    return 0


def _trimmed(member: tarfile.TarInfo) -> bool:
    top = member.name.split("/", 1)[-1]
    inner = member.name.split("/vendor/llama.cpp/", 1)
    return top.startswith(TRIMMED_TOP) or (len(inner) == 2 and inner[1].startswith(TRIMMED))


def pack(out: Path) -> int:
    """Write the offline carry (trimmed sdist + wheels for Python 3.12 manylinux x86-64); fail past 60 MiB."""
    (out / "wheels").mkdir(parents=True, exist_ok=True)
    source = llama_build.sdist()
    target = out / source.name
    with tarfile.open(source) as src, tarfile.open(target, "w:gz", compresslevel=9) as dst:
        for member in src:
            if not _trimmed(member):
                dst.addfile(member, src.extractfile(member) if member.isfile() else None)
    platforms = [f"--platform=manylinux_2_{n}_x86_64" for n in (17, 27, 28, 34)] + ["--platform=manylinux2014_x86_64"]
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--only-binary=:all:", "--python-version", "3.12"]
    cmd += ["--implementation", "cp", *platforms, "-d", str(out / "wheels"), *_requirements()]
    _run(cmd)
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    print(f"{out}: {size / 2**20:.1f} MiB (sdist {target.stat().st_size / 2**20:.1f} MiB)")
    if size > CARRY_LIMIT:
        print(f"over the {CARRY_LIMIT // 2**20} MiB a device run carries", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m devtools.gpu_check", description=__doc__.split("\n")[0])
    p.add_argument("what", nargs="?", choices=["run", "pack"], default="run")
    p.add_argument("--carry", type=Path, default=None, help="build offline from this pack (default: .gpu-carry if any)")
    p.add_argument("--out", type=Path, default=ROOT / ".gpu-carry", help="where pack writes")
    p.add_argument("--rounds", type=int, default=3, help="benchmark rounds")
    args = p.parse_args(argv)
    if args.what == "pack":
        return pack(args.out)
    carry = args.carry or (ROOT / ".gpu-carry" if (ROOT / ".gpu-carry").is_dir() else None)
    return run(carry.resolve() if carry else None, args.rounds)


if __name__ == "__main__":
    raise SystemExit(main())
