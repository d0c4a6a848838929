"""Build llama-cpp-python (and llama-server, for the benchmarks) so that it runs on the machine that built it.

Why this exists: llama.cpp builds with ``GGML_NATIVE=ON`` (``-march=native``), which on a CPU with Intel AMX
(Sapphire Rapids and later Xeons: most current cloud VMs) compiles its AMX matmul kernels in. In the llama.cpp
that llama-cpp-python 0.3.36 vendors, that path (``ggml-cpu/amx/mmq.cpp``, ``tinygemm_kernel_amx``) runs
``tilezero`` in threads that never loaded a tile configuration: every quantized model dies on its first request
(SIGILL, or SIGSEGV in the worker). So the build keeps ``-march=native`` and adds ``-mno-amx-tile -mno-amx-int8
-mno-amx-bf16``: GCC applies explicit ``-mno-*`` flags whatever their position, so only AMX is dropped and AVX-512,
VNNI and the rest of the machine's instruction set stay.

Pip's wheel cache is keyed by the sdist alone, not by ``CMAKE_ARGS`` or ``CFLAGS``, so it may hand back a wheel
built otherwise (AMX on, or on another CPU). So the wheel pip gives is checked through its own library's
``llama_print_system_info`` (no AMX, no feature this CPU lacks) and built again without the cache when it fails;
the wheel that passes is kept in a wheelhouse keyed by everything that shapes it (version, flags, the CPU's flags,
the compiler), and ``check`` applies the same test to the installed library.

The GPU backend (CUDA, Metal, HIP, Vulkan) is chosen from the machine by ``devtools/llama_backend.py``
(``MODELROUTER_LLAMA_BACKEND`` overrides it); every backend keeps the CPU flags above, and the user's own
``CMAKE_ARGS`` come after ours. The wheelhouse key holds the backend and the GPU architectures (a CPU build's
key is what it was before backends existed, so caches keep hitting).

    python -m devtools.llama_build wheel          # prints the wheelhouse holding the wheel (builds it once)
    python -m devtools.llama_build check          # fails unless the installed llama_cpp was built this way
    python -m devtools.llama_build backend        # one line: the backend chosen here, and why
    python -m devtools.llama_build llama-server   # prints the path of llama-server built with the same flags
    python -m devtools.llama_build source         # prints the vendored llama.cpp sources (unpacked once)
    python -m devtools.llama_build flags          # the CMake options, for the benchmarks' reports

``MODELROUTER_LLAMA_SDIST=/path/llama_cpp_python-VERSION.tar.gz`` builds offline from that sdist (a GPU
machine with no network: ``devtools/gpu_check.py``), with the build tools of the Python running this module
(scikit-build-core, cmake, ninja) instead of an isolated build environment.

Standard library only: the Makefile runs it before anything else is installed.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import tomllib
import zipfile
from pathlib import Path

from devtools import vulkan_patch
from devtools.llama_backend import BackendChoice, choose_backend, gather_facts
from devtools.llama_check import backend_problems, library_backends

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "llama-cpp-python"
# The instruction-set features the build must not use (see the module docstring), as llama.cpp names them in
# llama_print_system_info.
BANNED_FEATURES = ("AMX_INT8",)


def pinned_version() -> str:
    """The llama-cpp-python version pyproject.toml pins: the one source of truth for what gets built."""
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    for dep in deps:
        m = re.fullmatch(rf"{PACKAGE}==([\w.]+)", dep.replace(" ", ""))
        if m:
            return m.group(1)
    raise SystemExit(f"pyproject.toml pins no {PACKAGE}==VERSION")


def isa_flags(machine: str | None = None) -> list[str]:
    """Compiler flags that turn AMX off on x86-64 (other architectures have no AMX and would reject them)."""
    machine = (machine or platform.machine()).lower()
    return ["-mno-amx-tile", "-mno-amx-int8", "-mno-amx-bf16"] if machine in ("x86_64", "amd64") else []


def cpu_cmake_args() -> list[str]:
    """The CPU part of every build: native code for this CPU, Intel AMX off, nothing else changed."""
    flags = " ".join(isa_flags())
    return ["-DGGML_NATIVE=ON", f"-DCMAKE_C_FLAGS={flags}", f"-DCMAKE_CXX_FLAGS={flags}"]


@functools.cache
def choice() -> BackendChoice:
    """The backend this machine builds (``devtools/llama_backend.py``), read once per process."""
    return choose_backend(gather_facts(), cpu_cmake_args())


def cmake_args() -> list[str]:
    """The CMake options of both builds: the CPU flags, the backend's options, the user's CMAKE_ARGS."""
    return list(choice().cmake_args)


def _cpu_flags() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                return line
    except OSError:
        pass
    return platform.processor()


def _compiler() -> str:
    cc = os.environ.get("CC", "cc")
    try:
        return subprocess.run([cc, "--version"], capture_output=True, text=True, check=False).stdout.split("\n")[0]
    except OSError:
        return cc


def build_key() -> str:
    """A digest of everything that shapes the build: a wheel found under it was built exactly this way."""
    parts = [pinned_version(), *cmake_args(), platform.machine(), _cpu_flags(), _compiler(), sys.version]
    if choice().backend != "cpu":  # a CPU build's key stays what it was before backends existed
        parts += [choice().backend, *choice().gpu_archs, *choice().patches]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def cache_root() -> Path:
    """Where built wheels and binaries are kept between clones (``MODELROUTER_BUILD_CACHE`` overrides)."""
    default = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "modelrouter" / "build"
    return Path(os.environ.get("MODELROUTER_BUILD_CACHE") or default)


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["CMAKE_ARGS"] = " ".join(f"'{a}'" if " " in a else a for a in cmake_args())
    env.setdefault("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 2))
    return env


def sdist() -> Path:
    """llama-cpp-python's sdist from the package index, downloaded once: the wheel, llama-server and the
    tests that read llama.cpp's sources (``common/arg.cpp``) all come from this one file.
    ``MODELROUTER_LLAMA_SDIST`` names a local one instead (an offline build)."""
    local = os.environ.get("MODELROUTER_LLAMA_SDIST")
    if local:
        return Path(local)
    folder = cache_root() / "sdist"
    found = sorted(folder.glob(f"llama_cpp_python-{pinned_version()}.tar.gz"))
    if found:
        return found[0]
    folder.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--no-binary",
        ":all:",
        "--dest",
        str(folder),
        f"{PACKAGE}=={pinned_version()}",
    ]
    subprocess.run(cmd, check=True, stdout=sys.stderr)
    (archive,) = folder.glob(f"llama_cpp_python-{pinned_version()}.tar.gz")
    return archive


def vendored_llama_cpp() -> Path:
    """The llama.cpp sources that the pinned llama-cpp-python vendors, unpacked once."""
    root = cache_root() / f"src-{pinned_version()}"
    source = root / f"llama_cpp_python-{pinned_version()}" / "vendor" / "llama.cpp"
    if (source / "common" / "arg.cpp").exists():
        return source
    staging = Path(tempfile.mkdtemp(prefix="src-", dir=cache_root()))
    with tarfile.open(sdist()) as tar:
        tar.extractall(staging, filter="data")
    if root.exists():
        shutil.rmtree(staging)
    else:
        staging.replace(root)  # whole or not at all, as the wheelhouse
    return source


# llama_print_system_info's feature names -> the /proc/cpuinfo flag the CPU must have to run them.
_CPU_FLAG = {
    "SSE3": "pni",
    "SSSE3": "ssse3",
    "AVX": "avx",
    "AVX2": "avx2",
    "F16C": "f16c",
    "FMA": "fma",
    "BMI2": "bmi2",
    "AVX_VNNI": "avx_vnni",
    "AVX512": "avx512f",
    "AVX512_VBMI": "avx512vbmi",
    "AVX512_VNNI": "avx512_vnni",
    "AVX512_BF16": "avx512_bf16",
    "AMX_INT8": "amx_int8",
}


def features(info: str) -> set[str]:
    """The instruction-set features a llama.cpp build reports as compiled in (``NAME = 1``)."""
    return set(re.findall(r"\b([A-Z0-9_]+) = 1\b", info))


def problems(info: str, cpu_flags: str | None = None) -> list[str]:
    """Why a library with this ``llama_print_system_info`` cannot run here: a banned feature, or one
    this CPU lacks (a wheel built on another machine). Empty: it runs here."""
    flags = set((cpu_flags if cpu_flags is not None else _cpu_flags()).split())
    found = features(info)
    wrong = [f"{f} (the AMX kernels crash every quantized model)" for f in BANNED_FEATURES if f in found]
    if flags and platform.machine().lower() in ("x86_64", "amd64"):
        lacking = [
            f for f in sorted(found) if f in _CPU_FLAG and f not in BANNED_FEATURES and _CPU_FLAG[f] not in flags
        ]
        wrong += [f"{f} (this CPU has no {_CPU_FLAG[f]})" for f in lacking]
    return wrong


def _library_info(lib_dir: Path) -> str:
    """``llama_print_system_info`` of the libllama in ``lib_dir``, read in a child process (loading a
    library built for another CPU may itself crash, and must not take this process with it)."""
    code = (
        "import ctypes, sys; lib = ctypes.CDLL(sys.argv[1]); lib.llama_print_system_info.restype = ctypes.c_char_p; "
        "print(lib.llama_print_system_info().decode(errors='replace'))"
    )
    cmd = [sys.executable, "-c", code, str(lib_dir / "libllama.so")]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return f"(cannot load: exit {done.returncode} {done.stderr.strip()[-300:]})"
    return done.stdout.strip()


def wheel_problems(wheel: Path) -> list[str]:
    """Why ``wheel`` cannot run here (see :func:`problems`), read from its own library."""
    with tempfile.TemporaryDirectory(prefix="wheel-check-") as tmp:
        with zipfile.ZipFile(wheel) as zf:
            zf.extractall(tmp, [n for n in zf.namelist() if n.startswith("llama_cpp/lib/")])
        info = _library_info(Path(tmp) / "llama_cpp" / "lib")
    return [info] if info.startswith("(cannot load") else problems(info)


PATCHES = {"vulkan-layer-settings": vulkan_patch.apply}
"""What each of :attr:`BackendChoice.patches` does to the build's own copy of the unpacked sdist."""


def build_tree(into: Path) -> Path:
    """The sdist unpacked into ``into`` (a folder the build owns, never the shared one that
    :func:`vendored_llama_cpp` returns to the other tools), with the chosen backend's patches applied."""
    with tarfile.open(sdist()) as tar:
        tar.extractall(into, filter="data")
    (tree,) = (p for p in into.iterdir() if p.is_dir() and p.name.startswith("llama_cpp_python-"))
    for name in choice().patches:
        print(f"{name}: {PATCHES[name](tree)}", file=sys.stderr)
    return tree


def _pip_wheel(out: Path, *, use_cache: bool) -> Path:
    cache = [] if use_cache else ["--no-cache-dir"]
    source = [f"{PACKAGE}=={pinned_version()}"]
    offline = ["--no-index", "--no-build-isolation"] if os.environ.get("MODELROUTER_LLAMA_SDIST") else []
    if offline:  # offline: this sdist, this Python's build tools
        source = [*offline, str(sdist())]
    with tempfile.TemporaryDirectory(prefix="tree-", dir=out.parent) as tmp:
        if choice().backend != "cpu":
            # A GPU build compiles its own unpacked copy: pip's wheel cache is keyed by the sdist alone and
            # may hold a CPU wheel of it (which would pass the CPU test below), and patches need a tree.
            source = [*offline, str(build_tree(Path(tmp)))]
        cmd = [sys.executable, "-m", "pip", "wheel", *cache, "--no-deps", "--no-binary", PACKAGE]
        cmd += ["--wheel-dir", str(out), *source]
        subprocess.run(cmd, env=_env(), check=True, stdout=sys.stderr)
    (wheel,) = out.glob("llama_cpp_python-*.whl")
    return wheel


def wheelhouse() -> Path:
    """The wheelhouse holding a llama-cpp-python wheel that runs on this machine; built the first time.

    pip's own cache is tried first (a wheel built earlier on this machine, or a CI image's): it is
    kept only if its library reports no banned feature and none this CPU lacks. Otherwise the wheel
    is built anew, without the cache, with this module's flags."""
    house = cache_root() / f"wheels-{build_key()}"
    print(choice().line(), file=sys.stderr)
    if any(house.glob("llama_cpp_python-*.whl")):
        return house
    cache_root().mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix="wheels-", dir=cache_root()))
    flags = " ".join(cmake_args())
    print(
        f"{PACKAGE} {pinned_version()}: from pip's cache, or built with {flags} (about 12 min on 2 cores)",
        file=sys.stderr,
    )
    wheel = _pip_wheel(staging, use_cache=True)
    wrong = wheel_problems(wheel)
    if wrong:
        print(f"the wheel pip had cannot run here ({'; '.join(wrong)}): building it again", file=sys.stderr)
        wheel.unlink()
        wrong = wheel_problems(_pip_wheel(staging, use_cache=False))
        if wrong:
            raise SystemExit(f"{PACKAGE} built here still cannot run here: {'; '.join(wrong)}")
    # Built aside and renamed: an interrupted build never leaves a wheelhouse that looks complete.
    if house.exists():
        shutil.rmtree(staging)
    else:
        staging.replace(house)
    return house


def system_info() -> str:
    """The installed library's own report of the features it was compiled with."""
    import llama_cpp  # only here: the rest of this module runs before llama_cpp is installed

    return bytes(llama_cpp.llama_print_system_info()).decode(errors="replace")


def check() -> None:
    """Fail, naming the cause and the fix, when the installed llama_cpp cannot run on this machine."""
    info = system_info()
    wrong = problems(info)
    if wrong:
        raise SystemExit(
            f"the installed llama-cpp-python cannot run here: it was compiled with {'; '.join(wrong)} "
            f"(llama_print_system_info: {info.strip()}). Rebuild it with `make clean install` "
            "(devtools/llama_build.py builds it for this CPU, AMX off)."
        )
    import llama_cpp

    backend = choice().backend
    found = library_backends(Path(llama_cpp.__file__).parent / "lib")
    wrong = [found] if isinstance(found, str) else backend_problems(backend, found)
    if wrong:
        raise SystemExit(
            f"the installed llama-cpp-python is not the {backend} build chosen here ({choice().reason}): "
            f"{'; '.join(wrong)}. Rebuild it with `make clean install`; MODELROUTER_LLAMA_BACKEND=cpu builds "
            "for the CPU alone."
        )
    backends = "" if isinstance(found, str) else f"; {found.describe()}"
    print(f"llama-cpp-python runs here (AMX off), {backend} backend{backends}: {info.strip()}")


def llama_server_path() -> Path:
    """Where :func:`llama_server` keeps the binary it builds (which may not be there yet)."""
    return cache_root() / f"llama-server-{build_key()}" / "llama-server"


def llama_server() -> Path:
    """llama-server from the llama.cpp that llama-cpp-python vendors, built with the same flags as the wheel."""
    binary = llama_server_path()
    if binary.exists():
        return binary
    source = vendored_llama_cpp()
    with tempfile.TemporaryDirectory(prefix="llama-server-") as tmp:
        build = Path(tmp) / "build"
        configure = [
            "cmake",
            "-S",
            str(source),
            "-B",
            str(build),
            "-DCMAKE_BUILD_TYPE=Release",
            "-DLLAMA_CURL=OFF",
            "-DLLAMA_OPENSSL=OFF",
            "-DBUILD_SHARED_LIBS=OFF",
            "-DLLAMA_BUILD_TESTS=OFF",  # only the server is built: its tests and examples need not configure
            "-DLLAMA_BUILD_EXAMPLES=OFF",
            # offline, the web UI cannot be fetched (the server then serves its API without it)
            *(["-DLLAMA_USE_PREBUILT_UI=OFF"] if os.environ.get("MODELROUTER_LLAMA_SDIST") else []),
            *cmake_args(),
        ]
        subprocess.run(configure, check=True, stdout=sys.stderr)
        jobs = str(os.cpu_count() or 2)
        subprocess.run(
            ["cmake", "--build", str(build), "--target", "llama-server", "-j", jobs], check=True, stdout=sys.stderr
        )
        binary.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(build / "bin" / "llama-server", binary)
    return binary


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m devtools.llama_build", description=__doc__.split("\n")[0])
    p.add_argument("what", choices=["wheel", "check", "backend", "llama-server", "source", "flags", "key"])
    what = p.parse_args(argv).what
    if what == "wheel":
        print(wheelhouse())
    elif what == "check":
        check()
    elif what == "backend":
        print(choice().line())
    elif what == "llama-server":
        print(llama_server())
    elif what == "source":
        print(vendored_llama_cpp())
    elif what == "flags":
        print(" ".join(cmake_args()))
    else:
        print(build_key())


if __name__ == "__main__":
    main()
