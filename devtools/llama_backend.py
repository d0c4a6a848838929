"""Which ggml backend to build llama-cpp-python (and llama-server) for: the GPU the user has, or the CPU.

The choice is a pure function of the machine's facts (:func:`choose_backend`), so every case is tested by
passing facts; :func:`gather_facts` reads them from the real machine (toolchains on ``PATH`` and in their
usual folders, ``nvidia-smi``, the environment). The rules, in order:

* ``MODELROUTER_LLAMA_BACKEND=cpu|cuda|metal|hip|vulkan`` wins; a backend asked for whose toolchain is
  missing fails with a message naming what is missing (never a silent CPU build);
* CUDA when ``nvcc`` is found (on ``PATH``, under ``CUDA_HOME``/``CUDA_PATH`` or ``/usr/local/cuda``) and an
  NVIDIA GPU answers ``nvidia-smi``, for its architecture (``CMAKE_CUDA_ARCHITECTURES=native``). A toolkit
  with no GPU (a CI image, a container built without the device) builds for the CPU unless CUDA is asked
  for, and then for :data:`CUDA_DEFAULT_ARCHS`: a CUDA library with no device to run on offloads nothing,
  so it would only cost its build (an hour on 2 cores) and fail ``llama_build check``;
* Metal on macOS on Apple silicon (llama-cpp-python's own default there: its CMakeLists forces it on);
* HIP and Vulkan only when asked for: a ROCm or Vulkan SDK on a machine says nothing of whether its GPU
  is the one to use (Vulkan is also found on machines whose only device is Mesa's software llvmpipe);
* the CPU otherwise.

Whatever the backend, the CPU part of the build keeps the CPU flags it is given (``-march=native``, AMX
off: see ``llama_build``), and the user's own ``CMAKE_ARGS`` come last, so that where they set the same
option, theirs wins.

Standard library only: the Makefile runs it before anything else is installed.
"""

from __future__ import annotations

import os
import platform
import re
import shlex
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from devtools.vulkan_patch import LAYER_SETTINGS_HEADER, needs_guard

BACKENDS = ("cpu", "cuda", "metal", "hip", "vulkan")
"""The values of ``MODELROUTER_LLAMA_BACKEND`` (``auto`` or empty: choose from the machine)."""
ENV = "MODELROUTER_LLAMA_BACKEND"
CUDA_DEFAULT_ARCHS = ("75-virtual", "80-virtual", "86-real", "89-real", "90-virtual")
"""CUDA architectures built when no GPU answers at build time (a CI image, a container built without the
device): Turing and later, as llama.cpp's own non-native list for CUDA 12-13 minus the architectures CUDA 13
dropped. ``-virtual`` entries are PTX that the driver compiles on first use for newer GPUs (Hopper's
``90-virtual`` covers Blackwell); ``-real`` ones are machine code for the commonest cards. Older GPUs:
``CMAKE_ARGS=-DCMAKE_CUDA_ARCHITECTURES=61``."""
VULKAN_LAYER_SETTINGS_HEADER = LAYER_SETTINGS_HEADER
"""Vulkan-Headers version that first has ``VK_EXT_layer_settings``, which ggml-vulkan needs (issue 38: older
headers need a guard in the vendored sources before a Vulkan build can succeed: ``devtools/vulkan_patch.py``)."""
VULKAN_PACKAGES = "libvulkan-dev glslc spirv-headers mesa-vulkan-drivers"
"""The Debian packages a Vulkan build needs (headers, shader compiler, SPIRV-Headers' CMake package) and the
driver it is tested on (Mesa's lavapipe: ``make gpu-path``)."""
# The ggml backend registry each backend's devices belong to (``ggml_backend_reg_name``).
REGISTRY = {"cpu": "CPU", "cuda": "CUDA", "metal": "MTL", "hip": "ROCm", "vulkan": "Vulkan"}


class BackendUnavailable(SystemExit):
    """The backend asked for cannot be built here; the message says what is missing (a SystemExit: the
    Makefile prints it and stops, no traceback)."""


@dataclass(frozen=True, slots=True)
class MachineFacts:
    """What the backend choice depends on, read once from the machine (:func:`gather_facts`)."""

    system: str
    """``platform.system()``: Linux, Darwin, Windows."""
    machine: str
    """``platform.machine()``: x86_64, arm64, aarch64."""
    nvcc: str | None = None
    """The CUDA compiler found, or None."""
    cuda_home: str = "/usr/local/cuda"
    """The CUDA toolkit folder looked in (``CUDA_HOME``, ``CUDA_PATH``, else /usr/local/cuda): for the message."""
    nvidia_gpus: tuple[str, ...] = ()
    """Compute capabilities of the GPUs ``nvidia-smi`` lists (``9.0``; ``?`` where it cannot say); empty
    when it did not answer."""
    hipcc: str | None = None
    """ROCm's HIP compiler found, or None."""
    amd_gpus: tuple[str, ...] = ()
    """The gfx targets ``rocminfo`` lists (``gfx1100``)."""
    glslc: str | None = None
    """The GLSL-to-SPIR-V compiler ggml-vulkan's shaders need, or None."""
    vulkan_header: str | None = None
    """``vulkan/vulkan_core.h`` found, or None."""
    vulkan_header_version: int | None = None
    """Its ``VK_HEADER_VERSION`` (see :data:`VULKAN_LAYER_SETTINGS_HEADER`)."""
    spirv_headers: str | None = None
    """SPIRV-Headers' CMake package (``SPIRV-HeadersConfig.cmake``): ggml-vulkan's CMakeLists requires it."""
    requested: str = ""
    """``MODELROUTER_LLAMA_BACKEND`` as set (empty: not set)."""
    user_cmake_args: str = ""
    """The user's own ``CMAKE_ARGS``."""


@dataclass(frozen=True, slots=True)
class BackendChoice:
    """The backend to build, why, and the CMake options that build it."""

    backend: str
    reason: str
    cmake_args: tuple[str, ...]
    """The CPU flags, then the backend's options, then the user's ``CMAKE_ARGS``."""
    gpu_archs: tuple[str, ...] = ()
    """The GPU architectures built for (part of the wheelhouse key)."""
    patches: tuple[str, ...] = ()
    """The changes the build makes to its copy of the vendored sources (part of the wheelhouse key):
    ``vulkan-layer-settings`` (``devtools/vulkan_patch.py``) where the Vulkan headers are older than 1.3.272."""

    def line(self) -> str:
        """The one line ``make run`` prints: what was built and why."""
        return f"llama-cpp-python: {self.backend} backend ({self.reason})"


def _arch(cap: str) -> str:
    """``9.0`` -> ``90``: CMake's spelling of a compute capability."""
    return cap.replace(".", "") if re.fullmatch(r"\d+\.\d+", cap) else cap


def _cuda(facts: MachineFacts, why: str) -> tuple[str, tuple[str, ...], tuple[str, ...]]:
    if facts.nvidia_gpus:
        archs = tuple(sorted({_arch(c) for c in facts.nvidia_gpus}))
        where = f"CMAKE_CUDA_ARCHITECTURES=native: {', '.join(archs)}"
        arch_arg = "native"
    else:
        archs = CUDA_DEFAULT_ARCHS
        where = "no GPU answers nvidia-smi: the default architectures"
        arch_arg = ";".join(archs)
    compiler = (f"-DCMAKE_CUDA_COMPILER={facts.nvcc}",) if facts.nvcc and os.sep in facts.nvcc else ()
    args = ("-DGGML_CUDA=on", f"-DCMAKE_CUDA_ARCHITECTURES={arch_arg}", *compiler)
    return f"{why}; {where}", args, archs


def _missing(backend: str, facts: MachineFacts) -> str | None:
    """What the asked-for backend lacks on this machine, in words; None when it can be built."""
    if backend == "cuda" and not facts.nvcc:
        return f"no nvcc on PATH nor under {facts.cuda_home}/bin: install the CUDA toolkit (or set CUDA_HOME to it)"
    if backend == "metal" and facts.system != "Darwin":
        return f"Metal exists on macOS only (this is {facts.system})"
    if backend == "hip" and not facts.hipcc:
        return "no hipcc on PATH nor under $ROCM_PATH or /opt/rocm: install ROCm's HIP SDK"
    if backend == "vulkan":
        parts = {"glslc": facts.glslc, "Vulkan headers": facts.vulkan_header, "SPIRV-Headers": facts.spirv_headers}
        lacking = [name for name, found in parts.items() if not found]
        if lacking:
            return (
                f"no {', no '.join(lacking)}: install the Vulkan SDK (Debian: apt-get install {VULKAN_PACKAGES}; "
                "`make vulkan` does it as root)"
            )
    if backend == "cpu" and facts.system == "Darwin":
        return "llama-cpp-python builds Metal on every Mac (its CMakeLists forces GGML_METAL on): use -ngl 0"
    return None


def _asked(facts: MachineFacts) -> str:
    asked = facts.requested.strip().lower()
    if asked in ("", "auto"):
        return ""
    if asked not in BACKENDS:
        msg = f"{ENV}={facts.requested!r}: choose one of {', '.join(BACKENDS)} (or leave it unset)"
        raise BackendUnavailable(msg)
    return asked


def _absent(facts: MachineFacts) -> str:
    """Why no GPU backend was chosen, and what else was found: the CPU line's reason."""
    if facts.nvcc:
        parts = [f"nvcc at {facts.nvcc} but no GPU answers nvidia-smi: {ENV}=cuda builds for CUDA anyway"]
    else:
        parts = [f"no nvcc, no CUDA toolkit under {facts.cuda_home}"]
    if facts.hipcc:
        parts.append(f"ROCm found: {ENV}=hip builds for it")
    if facts.glslc and facts.vulkan_header:
        parts.append(f"Vulkan SDK found: {ENV}=vulkan builds for it")
    parts.append(f"set {ENV} to choose")
    return "; ".join(parts)


def choose_backend(facts: MachineFacts, cpu_args: Sequence[str]) -> BackendChoice:
    """The backend to build for ``facts`` (the module docstring's rules), with ``cpu_args`` first in
    its CMake options. Raises :class:`BackendUnavailable` when the one asked for cannot be built."""
    asked = _asked(facts)
    if asked:
        lacking = _missing(asked, facts)
        if lacking:
            msg = f"{ENV}={asked}, but {lacking}"
            raise BackendUnavailable(msg)
        backend, why = asked, f"{ENV}={asked}"
    elif facts.nvcc and facts.nvidia_gpus:
        backend, why = "cuda", f"nvcc at {facts.nvcc}, {len(facts.nvidia_gpus)} NVIDIA GPU(s)"
    elif facts.system == "Darwin" and facts.machine in ("arm64", "aarch64"):
        backend, why = "metal", "macOS on Apple silicon"
    else:
        backend, why = "cpu", _absent(facts)
    args: tuple[str, ...] = ()
    archs: tuple[str, ...] = ()
    if backend == "cuda":
        why, args, archs = _cuda(facts, why)
    elif backend == "metal":
        args = ("-DGGML_METAL=on",)
    elif backend == "hip":
        archs = tuple(sorted(set(facts.amd_gpus)))
        args = ("-DGGML_HIP=on", *((f"-DGPU_TARGETS={';'.join(archs)}",) if archs else ()))
    patches: tuple[str, ...] = ()
    if backend == "vulkan":
        args = ("-DGGML_VULKAN=on",)
        if needs_guard(facts.vulkan_header_version):
            patches = ("vulkan-layer-settings",)
            why += f"; Vulkan headers 1.3.{facts.vulkan_header_version or '?'}: VK_EXT_layer_settings guarded"
    user = tuple(shlex.split(facts.user_cmake_args))
    if user:
        why += f"; your CMAKE_ARGS last: {facts.user_cmake_args.strip()}"
    return BackendChoice(backend, why, (*cpu_args, *args, *user), archs, patches)


# --- reading the machine ----------------------------------------------------------------------------------


def _run(cmd: Sequence[str], timeout: float = 20.0) -> str | None:
    """A command's stdout, or None when it is missing, fails or hangs (a wedged driver must not stop a build)."""
    try:
        done = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def _tool(name: str, folders: Sequence[str | None]) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    for folder in folders:
        if folder and (Path(folder) / "bin" / name).is_file():
            return str(Path(folder) / "bin" / name)
    return None


def _nvidia_gpus() -> tuple[str, ...]:
    caps = _run(["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"])
    if caps is not None:
        return tuple(line.strip() for line in caps.splitlines() if line.strip())
    names = _run(["nvidia-smi", "-L"])  # drivers older than 510 cannot report compute_cap
    return tuple("?" for line in (names or "").splitlines() if line.startswith("GPU "))


def _vulkan_header(environ: Mapping[str, str]) -> tuple[str | None, int | None]:
    roots = [environ.get("VULKAN_SDK", ""), "/usr", "/usr/local", "/opt/homebrew"]
    for root in filter(None, roots):
        header = Path(root) / "include" / "vulkan" / "vulkan_core.h"
        if header.is_file():
            m = re.search(r"#define\s+VK_HEADER_VERSION\s+(\d+)", header.read_text(errors="replace"))
            return str(header), int(m.group(1)) if m else None
    return None, None


def _spirv_headers(environ: Mapping[str, str]) -> str | None:
    """SPIRV-Headers' CMake config where CMake's find_package looks (<prefix>/share/cmake, lib/cmake)."""
    roots = [environ.get("VULKAN_SDK", ""), "/usr", "/usr/local", "/opt/homebrew"]
    for root in filter(None, roots):
        for sub in ("share/cmake", "lib/cmake", "share", "lib"):
            config = Path(root) / sub / "SPIRV-Headers" / "SPIRV-HeadersConfig.cmake"
            if config.is_file():
                return str(config)
    return None


def gather_facts(environ: Mapping[str, str] | None = None) -> MachineFacts:
    """The facts of this machine that :func:`choose_backend` reads (runs ``nvidia-smi`` and ``rocminfo``
    only where their toolchains are, each with a time limit)."""
    env = os.environ if environ is None else environ
    cuda_home = env.get("CUDA_HOME") or env.get("CUDA_PATH") or "/usr/local/cuda"
    nvcc = _tool("nvcc", [env.get("CUDA_HOME"), env.get("CUDA_PATH"), "/usr/local/cuda"])
    hipcc = _tool("hipcc", [env.get("ROCM_PATH"), env.get("HIP_PATH"), "/opt/rocm"])
    amd = tuple(sorted(set(re.findall(r"\bgfx[0-9a-f]+\b", _run(["rocminfo"]) or "")))) if hipcc else ()
    header, version = _vulkan_header(env)
    spirv = _spirv_headers(env)
    return MachineFacts(
        system=platform.system(),
        machine=platform.machine().lower(),
        nvcc=nvcc,
        cuda_home=cuda_home,
        nvidia_gpus=_nvidia_gpus() if nvcc or shutil.which("nvidia-smi") else (),
        hipcc=hipcc,
        amd_gpus=amd,
        glslc=_tool("glslc", [env.get("VULKAN_SDK")]),
        vulkan_header=header,
        vulkan_header_version=version,
        spirv_headers=spirv,
        requested=env.get(ENV, ""),
        user_cmake_args=env.get("CMAKE_ARGS", ""),
    )
