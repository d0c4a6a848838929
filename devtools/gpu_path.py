"""``make gpu-path``: tests/gpu on a real ggml GPU device on every machine: Vulkan on Mesa's software driver.

No machine here has a GPU, so without this the code that reads "offloaded N/M layers", fits layers to a
device's memory and evicts by it would meet a real ggml GPU device only on a user's machine. llama.cpp's own
CI has the same problem and the same answer (the ``ubuntu-llvmpipe`` job of its ``build-vulkan.yml``): a
Vulkan build run on Mesa's llvmpipe ("lavapipe"), a CPU that Vulkan sees as a device with 2 GiB of memory.

1. the Vulkan wheel (``MODELROUTER_LLAMA_BACKEND=vulkan``, ``devtools/llama_build.py``): built once into its
   own wheelhouse entry (~10-17 min on 2 cores, with the header guard of ``devtools/vulkan_patch.py`` where
   the system's Vulkan headers are older than 1.3.272), then taken from there;
2. ``.venv-vulkan``: that wheel in a venv of its own, over the main venv's packages (a ``.pth`` line: nothing
   copied or downloaded, and it follows the main venv when ``make install`` updates it; the venv's own
   site-packages come first on ``sys.path``, so ``llama_cpp`` is the Vulkan one, which ``check`` proves);
3. ``llama_build check`` there: ``llama_supports_gpu_offload()`` and a Vulkan device, else it stops;
4. ``tests/gpu`` there, with :data:`LAVAPIPE` (llama.cpp's CI settings) and Mesa's shader cache under the
   build cache, so the first worker's ~80 s pipeline compile is paid once per machine, not per test.
   ``-fa off`` is added by tests/gpu itself where the device is llvmpipe (its conftest says why).

Run by ``make gpu-path`` with the main venv's Python (``.ci/run`` after ``make test``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import venv
from collections.abc import Sequence
from pathlib import Path

from devtools import llama_build
from devtools.llama_backend import ENV

ROOT = Path(__file__).resolve().parents[1]
VENV = ROOT / ".venv-vulkan"
LAVAPIPE = {"GGML_VK_VISIBLE_DEVICES": "0", "GGML_VK_DISABLE_F16": "1", "GGML_VK_DISABLE_COOPMAT": "1"}
"""llama.cpp's own CI settings for llvmpipe: its one device, no f16 and no cooperative-matrix shaders (the
software driver's paths for them are slow or missing)."""
PTH = "modelrouter-main-venv.pth"


def _run(cmd: Sequence[str | Path], env: dict[str, str] | None = None) -> None:
    print("+", " ".join(str(c) for c in cmd), flush=True)
    subprocess.run([str(c) for c in cmd], check=True, cwd=ROOT, env=env)


def _site_packages(python: Path) -> Path:
    code = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    return Path(subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True).stdout.strip())


def vulkan_venv(house: Path) -> Path:
    """``.venv-vulkan`` with the wheel in ``house``, over this Python's packages; its python."""
    python = VENV / "bin" / "python"
    if not python.exists():
        venv.EnvBuilder(with_pip=False, symlinks=True).create(VENV)  # this Python's base: the same version
    # addsitedir, not a bare path: the main venv's own .pth files (the editable install) apply too.
    main = sysconfig.get_paths()["purelib"]
    (_site_packages(python) / PTH).write_text(f"import site; site.addsitedir({main!r})\n")
    marker = VENV / ".llama-wheelhouse"
    if not marker.exists() or marker.read_text() != str(house):
        # The main venv's pip installs into .venv-vulkan (--python); --ignore-installed: the CPU build seen
        # through the .pth line is the main venv's, neither uninstalled nor taken as already there.
        pip: list[str | Path] = [
            sys.executable,
            "-m",
            "pip",
            "--python",
            python,
            "install",
            "--no-deps",
            "--ignore-installed",
        ]
        _run([*pip, "--no-index", "--find-links", house, llama_build.PACKAGE])
        marker.write_text(str(house))
    return python


def test_env() -> dict[str, str]:
    """The environment of the check and the tests: the Vulkan backend, lavapipe's settings, Mesa's cache."""
    cache = llama_build.cache_root() / "mesa-shader-cache"
    cache.mkdir(parents=True, exist_ok=True)
    return {
        **os.environ,
        ENV: "vulkan",
        "PYTHONPATH": str(ROOT),
        "MESA_SHADER_CACHE_DIR": str(cache),
        "MESA_SHADER_CACHE_MAX_SIZE": "1G",
        **LAVAPIPE,
    }


def main(argv: Sequence[str] | None = None) -> int:
    os.environ[ENV] = "vulkan"
    print(llama_build.choice().line(), flush=True)
    python = vulkan_venv(llama_build.wheelhouse())
    env = test_env()
    _run([python, "-m", "devtools.llama_build", "check"], env)
    tests = ["-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", "-rs", "--durations=10"]
    _run([python, *tests, *(argv if argv is not None else sys.argv[1:]), "tests/gpu"], env)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
