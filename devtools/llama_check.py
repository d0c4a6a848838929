"""Whether an installed llama.cpp library really has the backend it was built for.

A CUDA build that silently fell back to the CPU (CMake found no toolkit, a stale wheel from pip's cache)
still imports and serves, only 5-50x slower: so ``llama_build check`` asks the library itself. It reads,
in a child process (loading a GPU library creates a driver context, and one built for another machine
may crash), ``llama_supports_gpu_offload()`` and ggml's device list (the API
``workers/inference/llama/_devices.py`` reads in the worker), and :func:`backend_problems` says what is
wrong with them for the backend chosen.

Standard library only, as ``llama_build``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from devtools.llama_backend import REGISTRY

# ggml_backend_dev_type: CPU, GPU, IGPU, ACCEL (ggml-backend.h at the vendored commit).
_TYPES = ("cpu", "gpu", "igpu", "accel")
_PROBE = """
import ctypes, json, sys
folder, suffix = sys.argv[1], sys.argv[2]
llama = ctypes.CDLL(f"{folder}/libllama{suffix}")
llama.llama_backend_init()
offload = bool(llama.llama_supports_gpu_offload())
try:
    ggml = ctypes.CDLL(f"{folder}/libggml{suffix}")
except OSError:
    ggml = ctypes.CDLL(f"{folder}/libggml-base{suffix}")
vp = ctypes.c_void_p
ggml.ggml_backend_dev_count.restype = ctypes.c_size_t
ggml.ggml_backend_dev_get.argtypes, ggml.ggml_backend_dev_get.restype = [ctypes.c_size_t], vp
ggml.ggml_backend_dev_name.argtypes, ggml.ggml_backend_dev_name.restype = [vp], ctypes.c_char_p
ggml.ggml_backend_dev_type.argtypes, ggml.ggml_backend_dev_type.restype = [vp], ctypes.c_int
ggml.ggml_backend_dev_backend_reg.argtypes, ggml.ggml_backend_dev_backend_reg.restype = [vp], vp
ggml.ggml_backend_reg_name.argtypes, ggml.ggml_backend_reg_name.restype = [vp], ctypes.c_char_p
devices = []
for i in range(ggml.ggml_backend_dev_count()):
    dev = ggml.ggml_backend_dev_get(i)
    reg = ggml.ggml_backend_dev_backend_reg(dev)
    devices.append({
        "name": ggml.ggml_backend_dev_name(dev).decode(errors="replace"),
        "type": ggml.ggml_backend_dev_type(dev),
        "registry": ggml.ggml_backend_reg_name(reg).decode(errors="replace") if reg else "",
    })
print(json.dumps({"gpu_offload": offload, "devices": devices}))
"""


@dataclass(frozen=True, slots=True)
class LibraryDevice:
    """One ggml device of a library: its name (``CUDA0``), type (``gpu``) and registry (``CUDA``)."""

    name: str
    type: str
    registry: str


@dataclass(frozen=True, slots=True)
class LibraryBackends:
    """What a library reports of itself: whether it can offload layers, and its devices."""

    gpu_offload: bool
    devices: tuple[LibraryDevice, ...]

    def describe(self) -> str:
        names = ", ".join(f"{d.name} ({d.registry}, {d.type})" for d in self.devices) or "none"
        return f"llama_supports_gpu_offload() {str(self.gpu_offload).lower()}; devices: {names}"


def library_backends(lib_dir: Path) -> LibraryBackends | str:
    """The backends of the libllama in ``lib_dir``, read in a child process; a string says why they
    could not be read."""
    suffix = ".dylib" if sys.platform == "darwin" else ".so"
    cmd = [sys.executable, "-c", _PROBE, str(lib_dir), suffix]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    except subprocess.TimeoutExpired:
        return "the device probe did not answer within 300 s"
    if done.returncode != 0:
        return f"cannot load it: exit {done.returncode} {done.stderr.strip()[-300:]}"
    raw = json.loads(done.stdout.strip().splitlines()[-1])
    devices = tuple(
        LibraryDevice(d["name"], _TYPES[d["type"]] if 0 <= d["type"] < len(_TYPES) else "gpu", d["registry"])
        for d in raw["devices"]
    )
    return LibraryBackends(bool(raw["gpu_offload"]), devices)


def backend_problems(backend: str, found: LibraryBackends) -> list[str]:
    """Why a library reporting ``found`` is not a ``backend`` build (empty: it is). A GPU backend needs
    ``llama_supports_gpu_offload()`` and at least one device of its registry; a CPU build needs neither."""
    if backend == "cpu":
        return []
    wrong = []
    if not found.gpu_offload:
        wrong.append("llama_supports_gpu_offload() is false (the library was built without a GPU backend)")
    registry = REGISTRY[backend]
    if not any(d.registry == registry for d in found.devices):
        wrong.append(f"no {registry} device in its device list (was the driver found? is the GPU visible?)")
    return wrong
