"""``--fit``: lower the offloaded layers, then the context, until the model fits the devices.

This module is the seam's contract: the worker asks :func:`fit_offload` before it loads a model
whose ``-ngl`` is ``auto`` (or whose ``-c`` is 0) with ``--fit on``, and loads with the plan's
layers and context. The algorithm (llama-server's ``common_fit_params``, ``common/fit.cpp`` in
the vendored sources) is another change's: until it lands, the plan leaves llama.cpp's choice.

Pure module: stdlib and the core only.
"""

from __future__ import annotations

from dataclasses import dataclass

from service.core.devices import Device
from service.core.launch import InferenceLaunch
from service.core.node_state import ModelShape


@dataclass(frozen=True, slots=True)
class FitPlan:
    """What ``--fit`` decided: ``gpu_layers`` for ``llama_model_params.n_gpu_layers`` (-1: leave
    llama.cpp's default), ``n_ctx`` for the context (0: unchanged), and ``changes``: what was changed
    and why, in words (``instance_ready.offload.fit``)."""

    gpu_layers: int = -1
    n_ctx: int = 0
    changes: tuple[str, ...] = ()


def fit_offload(shape: ModelShape, launch: InferenceLaunch, devices: tuple[Device, ...]) -> FitPlan:
    """The layers and context that fit ``devices``' free memory for ``shape`` under ``launch``.

    Placeholder until the fit algorithm lands (another change replaces this body): no device
    that offloads (the CPU case) leaves everything as it is, and so, for now, does any other."""
    if not any(d.offloads for d in devices):
        return FitPlan(-1, 0, ())
    del shape, launch
    return FitPlan(-1, 0, ())
