"""Worker processes spawned by the service, in three parts:

* :mod:`workers.runtime`: what both workers share (typed emit, event sinks, log, parent watch, wake-up pipe);
* :mod:`workers.download`: ``python -m workers.download``, one process per download job;
* :mod:`workers.inference`: ``python -m workers.inference``, one process per loaded model.

The download and inference workers share only the runtime, and import nothing from the
service but ``service.core`` and ``service.event_store`` (tests/test_architecture.py).

:func:`lazy_exports` is here, in the root package every worker loads anyway, because a module
of its own would load with each front (``import workers.inference`` must load nothing else:
tests/workers/test_layout.py).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(package: str, homes: Mapping[str, str]) -> Callable[[str], Any]:
    """A package front's module ``__getattr__`` (PEP 562) that imports each exported name's home
    module on first use: ``__getattr__ = lazy_exports(__name__, _HOMES)``, with ``_HOMES`` mapping
    each name in ``__all__`` to its module.

    The workers' fronts need it because they are imported before anything slow may load: the
    download worker installs its signal handlers first, the inference worker records early stop
    signals, and its path to ready skips the GGUF check. Plain imports would add 68-184 ms there
    (``python -X importtime``, medians of 5; the numbers are in each front's docstring)."""

    def __getattr__(name: str) -> Any:  # Any: each name is its own type, given to mypy under TYPE_CHECKING
        if name in homes:
            return getattr(importlib.import_module(homes[name]), name)
        msg = f"module {package!r} has no attribute {name!r}"
        raise AttributeError(msg)

    return __getattr__
