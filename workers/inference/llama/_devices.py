"""ggml's backend devices, read through ctypes: what llama-server's ``--list-devices`` prints, and
the handles ``-dev`` names.

llama-cpp-python binds ``llama_supports_gpu_offload`` but not ggml's device API; the functions
(``ggml_backend_dev_count``, ``ggml_backend_dev_get``, ``ggml_backend_dev_name``,
``ggml_backend_dev_description``, ``ggml_backend_dev_type``, ``ggml_backend_dev_memory``,
``ggml_backend_dev_backend_reg``, ``ggml_backend_reg_name``) are exported by the ggml libraries the
wheel ships beside ``libllama``, already loaded with it.

Why measure in a worker, never in the service: on a CUDA build, asking a device for its memory
creates a CUDA context (hundreds of MiB of VRAM, held for the life of the process).
"""

from __future__ import annotations

import ctypes
import functools
import sys
from pathlib import Path
from typing import Any

from service.core.devices import DEVICE_TYPES, Device
from workers.inference.llama._bindings import lowlevel


def _library(stem: str) -> ctypes.CDLL | None:
    import llama_cpp.llama_cpp as bindings  # the package's lib folder, next to the bindings

    folder = Path(bindings.__file__).parent / "lib"
    suffix = ".dylib" if sys.platform == "darwin" else ".dll" if sys.platform == "win32" else ".so"
    path = folder / f"{stem}{suffix}"
    return ctypes.CDLL(str(path)) if path.exists() else None


@functools.cache
def _ggml() -> Any:
    """The ggml library with the device API's signatures declared (``ggml`` registers the backends;
    ``ggml-base`` holds the device accessors, reachable through it)."""
    lowlevel()  # libllama first: it loads libggml and its backends, and llama_backend_init registers them
    lib = _library("libggml") or _library("libggml-base")
    if lib is None:
        msg = "llama-cpp-python ships no ggml library beside libllama"
        raise OSError(msg)
    vp, sz = ctypes.c_void_p, ctypes.c_size_t
    lib.ggml_backend_dev_count.restype = sz
    lib.ggml_backend_dev_get.argtypes, lib.ggml_backend_dev_get.restype = [sz], vp
    for name in ("ggml_backend_dev_name", "ggml_backend_dev_description"):
        getattr(lib, name).argtypes, getattr(lib, name).restype = [vp], ctypes.c_char_p
    lib.ggml_backend_dev_type.argtypes, lib.ggml_backend_dev_type.restype = [vp], ctypes.c_int
    lib.ggml_backend_dev_memory.argtypes = [vp, ctypes.POINTER(sz), ctypes.POINTER(sz)]
    lib.ggml_backend_dev_memory.restype = None
    lib.ggml_backend_dev_backend_reg.argtypes, lib.ggml_backend_dev_backend_reg.restype = [vp], vp
    lib.ggml_backend_reg_name.argtypes, lib.ggml_backend_reg_name.restype = [vp], ctypes.c_char_p
    lib.ggml_backend_dev_by_name.argtypes, lib.ggml_backend_dev_by_name.restype = [ctypes.c_char_p], vp
    return lib


def _text(raw: bytes | None) -> str:
    return (raw or b"").decode(errors="replace")


def _device(lib: Any, handle: int) -> Device:
    free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
    lib.ggml_backend_dev_memory(handle, ctypes.byref(free), ctypes.byref(total))
    kind = lib.ggml_backend_dev_type(handle)
    reg = lib.ggml_backend_dev_backend_reg(handle)
    return Device(
        name=_text(lib.ggml_backend_dev_name(handle)),
        description=_text(lib.ggml_backend_dev_description(handle)),
        type=DEVICE_TYPES[kind] if 0 <= kind < len(DEVICE_TYPES) else "gpu",
        backend=_text(lib.ggml_backend_reg_name(reg)) if reg else "",
        total_bytes=int(total.value),
        free_bytes=int(free.value),
    )


def devices() -> tuple[Device, ...]:
    """Every ggml backend device of this build, CPU included, with its memory now."""
    lc = lowlevel()
    lc.llama_backend_init()
    lib = _ggml()
    return tuple(_device(lib, lib.ggml_backend_dev_get(i)) for i in range(int(lib.ggml_backend_dev_count())))


def device_handle(name: str) -> int | None:
    """The ``ggml_backend_dev_t`` named ``name`` (``-dev``), or None when this build has none such."""
    lowlevel().llama_backend_init()
    handle = _ggml().ggml_backend_dev_by_name(name.encode())
    return int(handle) if handle else None


def supports_gpu_offload() -> bool:
    """``llama_supports_gpu_offload()``: whether this build can offload layers at all."""
    return bool(lowlevel().llama_supports_gpu_offload())
