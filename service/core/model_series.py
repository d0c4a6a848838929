"""Which per-model series ``GET /metrics`` shows (issue 34; llama.cpp #24851), and under which labels.

Prometheus keeps every label value it ever saw, so the labels are bounded by what the fold holds now:
a model gone from the catalogue (``model_removed``, or no longer listed) drops out, and so does a
revoked key. The status is a class (``2xx``...``5xx``), never the code. Monitoring reads (``/metrics``,
``/slots``, ``/props``...) are not a model's requests, as llama-server's counters do not count them.
Pure: stdlib only.
"""

from __future__ import annotations

from collections.abc import Mapping

from service.core.fold_instances import PROBE_ROUTES
from service.core.keys import ANONYMOUS, FULL, NamedKey
from service.core.state import RouterState

KEYS_OFF = ""
"""The key of a series while no named key exists: the ``key`` label is left out then."""


def counted(route: str) -> bool:
    """Whether a completed request on ``route`` counts as a request of its model (not a probe)."""
    return route not in PROBE_ROUTES


def status_class(status_code: int) -> str:
    """``2xx``, ``4xx``...: bounded, where a status code is whatever a worker answered."""
    return f"{min(max(status_code // 100, 1), 5)}xx"


def shown_model(state: RouterState, name: str) -> bool:
    """Whether ``name`` still names a model of the catalogue: in the fold and listed (a removed one is
    kept in the fold, absent, until it comes back)."""
    model = state.models.get(name)
    return model is not None and model.listed


def keys_on(keys: Mapping[str, NamedKey]) -> bool:
    """Named keys exist: the series carry a ``key`` label (one per caller), else one per model."""
    return bool(keys)


def shown_key(key: str | None, keys: Mapping[str, NamedKey]) -> str | None:
    """The ``key`` label of a request made by ``key`` (None: dropped from the per-key series): a live
    named key, a full key (``api-key``) or ``anonymous``; a revoked key, or none recorded (a log
    written before issue 34), has no series of its own."""
    if key is None:
        return None
    return key if key in keys or key in (FULL, ANONYMOUS) else None
