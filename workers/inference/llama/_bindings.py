"""llama-cpp-python's ctypes bindings, imported without the rest of the package until needed.

Why import only ``llama_cpp.llama_cpp`` (see :func:`lowlevel`): the package's
``__init__`` also imports ``llama_cpp.llama`` and with it numpy and jinja2,
~0.3 s of CPU on the path to ready that the decode loop never uses. Chat
formatting needs them; :func:`complete_import` runs the deferred ``__init__``
on a helper thread while llama.cpp loads the model (the C call releases the GIL).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import threading
from typing import Any

_DEFERRED = "_modelrouter_deferred_init"
_import_lock = threading.Lock()


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
