"""llama-server's offload and fit flags, decided once before a load, and what the load did.

* :func:`cpu_build_warnings`: llama-server's own warnings for ``-ngl``, ``-sm``, ``-ts`` and ``-mg``
  on a build that cannot offload (``common/arg.cpp``), printed once, before the load.
* :func:`fit_plan`: the ``--fit`` seam: with ``--fit on`` and ``-ngl auto`` (or ``-c 0``), the layers
  and context :func:`service.core.fit.fit_offload` finds for the devices' free memory. Skipped on a
  build without GPU offload, where there is nothing to fit.
* :func:`placement`: the ``llama_model_params`` offload fields, after the plan.
* :func:`offload_of`: ``instance_ready.offload``, from llama.cpp's load log.
"""

from __future__ import annotations

from service.core.devices import Offload
from service.core.fit import FitPlan, fit_offload
from service.core.launch import DEFAULTS, InferenceLaunch
from service.core.launch_devices import gpu_layers_number
from service.core.load_log import offload_report, parse_load_log
from service.core.model_shape import model_shape
from service.core.node_state import ModelShape
from workers.inference.llama import Placement

NO_GPU_LAYERS = (
    "warning: no usable GPU found, --gpu-layers option will be ignored",
    "warning: one possible reason is that llama.cpp was compiled without GPU support",
    "warning: consult docs/build.md for compilation instructions",
)
"""llama-server's words for ``-ngl`` on a build without GPU offload."""
_NO_EFFECT = "warning: llama.cpp was compiled without support for GPU offload. Setting {} has no effect."


def cpu_build_warnings(launch: InferenceLaunch) -> tuple[str, ...]:
    """llama-server's warnings for the offload flags ``launch`` sets, on a build that cannot offload.

    llama-server prints them as it parses each flag; a launch carries a flag only when it differs
    from the default, so ``-ngl auto`` given explicitly goes unwarned here."""
    lines: list[str] = []
    if launch.n_gpu_layers != DEFAULTS["n_gpu_layers"]:
        lines += NO_GPU_LAYERS
    if launch.split_mode != DEFAULTS["split_mode"]:
        lines.append(_NO_EFFECT.format("the split mode"))
    if launch.tensor_split is not None:
        lines.append(_NO_EFFECT.format("a tensor split"))
    if launch.main_gpu != DEFAULTS["main_gpu"]:
        lines.append(_NO_EFFECT.format("the main GPU"))
    return tuple(lines)


def read_shape(path: str) -> ModelShape | None:
    """The model's shape from its GGUF header (the worker's own header walk), or None. Only ``--fit``
    on a GPU build reads it: the walk imports ``gguf`` and numpy (~60 ms) the path to ready skips."""
    from workers.inference.llama import GGUFCheckError, inspect_gguf

    try:
        info = inspect_gguf(path)
    except GGUFCheckError:
        return None  # the load says what is wrong with the file
    return model_shape(path, info.file_size, {**info.metadata, **info.array_lengths, **info.tensor_parts})


def fit_plan(launch: InferenceLaunch, path: str) -> FitPlan:
    """``--fit``: what to load with so the model fits the devices' free memory (see the module doc)."""
    if launch.fit != "on" or (launch.n_gpu_layers != "auto" and launch.n_ctx > 0):
        return FitPlan()
    from workers.inference.llama import devices, supports_gpu_offload

    if not supports_gpu_offload():
        return FitPlan()
    shape = read_shape(path)
    return FitPlan() if shape is None else fit_offload(shape, launch, devices())


def placement(launch: InferenceLaunch, plan: FitPlan) -> Placement:
    """The offload fields of ``llama_model_params``: ``-ngl`` (``auto`` -1, ``all`` -2) unless
    ``--fit`` chose the layers, ``-ts`` and ``-dev``."""
    layers = gpu_layers_number(launch.n_gpu_layers)
    if launch.n_gpu_layers == "auto" and plan.gpu_layers != -1:
        layers = plan.gpu_layers
    split = tuple(float(v) for v in launch.tensor_split.split(",")) if launch.tensor_split else ()
    devices = tuple(d.strip() for d in launch.device.split(",")) if launch.device else None
    return Placement(layers, split, devices)


def fitted_n_ctx(launch: InferenceLaunch, plan: FitPlan) -> int:
    """``-c`` after ``--fit``: the plan's context only where ``-c`` was left to the model (0)."""
    return plan.n_ctx if launch.n_ctx <= 0 and plan.n_ctx > 0 else launch.n_ctx


def offload_of(launch: InferenceLaunch, used: Placement, plan: FitPlan, lines: list[str], n_layer: int) -> Offload:
    """``instance_ready.offload``: what was asked, passed and done (from the load log ``lines``)."""
    return offload_report(
        parse_load_log(lines),
        requested=launch.n_gpu_layers,
        gpu_layers=used.n_gpu_layers,
        n_layer=n_layer,
        fit=plan.changes,
    )
