"""llama-cpp-python's ctypes bindings, imported without the rest of the package until needed.

Why import only ``llama_cpp.llama_cpp`` (see :func:`lowlevel`): the package's
``__init__`` also imports ``llama_cpp.llama`` and with it numpy and jinja2,
~0.3 s of CPU on the path to ready that the decode loop never uses. Chat
formatting needs them; :func:`complete_import` runs the deferred ``__init__``
on a helper thread while llama.cpp loads the model (the C call releases the GIL).

Why :data:`OMP_SPIN` (set before llama.cpp, and with it libgomp, loads): ggml
computes a token in a few hundred steps with an OpenMP barrier after each,
and libgomp's default is to spin up to 300,000 pauses (milliseconds) at a
barrier before it sleeps. When another process holds the core the partner
thread needs, both threads burn their time slices spinning: on the shared
2-core VM a 128-token stream fell to 2-5 tokens/s where bounded spinning
kept 15-50 (docs/benchmarks.md, "Where a token's time goes"). An
``OMP_WAIT_POLICY`` or ``GOMP_SPINCOUNT`` of the user's wins.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import threading
from typing import Any

_DEFERRED = "_modelrouter_deferred_init"
_import_lock = threading.Lock()
OMP_SPIN = "1000"  # GOMP_SPINCOUNT: pauses at an OpenMP barrier before sleeping (libgomp's default: 300,000)


def bound_omp_spin(environ: dict[str, str] | os._Environ[str]) -> None:
    """Bound libgomp's spinning unless the environment already chose a wait policy (see the module docstring)."""
    if "OMP_WAIT_POLICY" not in environ and "GOMP_SPINCOUNT" not in environ:
        environ["GOMP_SPINCOUNT"] = OMP_SPIN


def lowlevel() -> Any:
    """``llama_cpp.llama_cpp`` (the ctypes bindings), without running the package ``__init__``.

    The deferred package gets the bindings' names (its ``__init__`` would
    star-import them), and llama-cpp-python's log hook (``llama_cpp._logger``,
    which calls ``llama_log_set`` on import) is imported here, once: a later
    import of ``llama_cpp.llama`` then cannot replace the worker's own log
    callback, even while a model loads.
    """
    mod = sys.modules.get("llama_cpp.llama_cpp")
    if mod is not None:
        return mod
    with _import_lock:
        if "llama_cpp" not in sys.modules:
            bound_omp_spin(os.environ)  # read by libgomp once, when llama.cpp's libraries load below
            spec = importlib.util.find_spec("llama_cpp")
            if spec is None or spec.loader is None:
                raise ImportError("llama-cpp-python is not installed")
            pkg = importlib.util.module_from_spec(spec)
            setattr(pkg, _DEFERRED, spec)
            sys.modules["llama_cpp"] = pkg
            bindings = importlib.import_module("llama_cpp.llama_cpp")
            pkg.__dict__.update({k: v for k, v in vars(bindings).items() if not k.startswith("_")})
            importlib.import_module("llama_cpp._logger")
        return importlib.import_module("llama_cpp.llama_cpp")


def complete_import() -> None:
    """Run ``llama_cpp/__init__`` if :func:`lowlevel` deferred it, then import the chat formats.

    Idempotent and thread-safe; may run while a model loads (see :func:`lowlevel`).
    """
    with _import_lock:
        pkg = sys.modules.get("llama_cpp")
        spec = getattr(pkg, _DEFERRED, None) if pkg is not None else None
        if pkg is not None and spec is not None:
            delattr(pkg, _DEFERRED)
            spec.loader.exec_module(pkg)
    importlib.import_module("llama_cpp.llama_chat_format")
