"""llama-server's ``--fit``: lower what the user left unset until the model fits the devices' free memory.

A port of ``common_params_fit_impl`` (``common/fit.cpp`` at the vendored commit) over our estimate
(:mod:`service.core.device_memory`) instead of llama.cpp's trial allocations, so the service can
decide before a worker starts, and the worker with the same figures:

1. with every layer offloaded (or ``-ngl N``) and the requested context, each used device must keep
   its margin free (``-fitt``, MiB per device, 1024 by default; one value for every device). If so,
   nothing changes;
2. else, when ``-c`` is unset (0: the training context), the context shrinks, in steps of 256 cells
   per stream and no lower than ``--fit-ctx``, to the largest that fits the devices' free memory
   less their margins, in sum (llama.cpp's "global surplus"; with several devices, half a layer per
   device more is kept back, as llama.cpp does, since only whole layers move). An explicit ``-c`` is
   never changed;
3. else, with ``-ngl auto``, the offloaded layers go down to the most with which every device keeps
   its margin (the layers left run on the CPU). An explicit ``-ngl``, ``-ts`` or ``-sm row`` stops
   here, as llama.cpp stops ("n_gpu_layers already set by user"): the load is tried as asked.

``--fit off``, no device to offload to and ``-sm tensor`` (llama.cpp: "not implemented") change
nothing. Unlike llama.cpp, a fitted split across several GPUs keeps llama.cpp's default proportions
(the worker passes ``gpu_layers`` only, not a ``tensor_split``).

Pure module: stdlib only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from service.core.device_memory import layers_wanted, offload_devices, split_need
from service.core.devices import HOST, MIB, Device
from service.core.launch import InferenceLaunch
from service.core.launch_devices import FIT_TARGET_MIB, gpu_layers_number
from service.core.memory import KV_PAD, slots
from service.core.node_state import ModelShape


@dataclass(frozen=True, slots=True)
class FitPlan:
    """What ``--fit`` sets: ``gpu_layers`` for llama.cpp's ``n_gpu_layers`` (-1: leave its default,
    every layer), ``n_ctx`` (0: unchanged), and ``changes``, what changed and why, in words."""

    gpu_layers: int = -1
    n_ctx: int = 0
    changes: tuple[str, ...] = ()


UNCHANGED = FitPlan()


def margins(launch: InferenceLaunch, count: int) -> tuple[int, ...]:
    """``-fitt`` in bytes for each of ``count`` devices: one value for all, else by position (a device
    past the list keeps llama-server's 1024 MiB)."""
    values = [int(v) for v in launch.fit_target.split(",") if v]
    if len(values) == 1:
        values *= count
    values = (values + [FIT_TARGET_MIB] * count)[:count]
    return tuple(v * MIB for v in values)


def _streams(launch: InferenceLaunch) -> int:
    """KV streams: one pool with ``-np`` auto or ``--kv-unified``, else one per slot (llama.cpp's n_seq_max)."""
    return 1 if launch.n_parallel <= 0 or launch.kv_unified else slots(launch)


def fit_offload(shape: ModelShape, launch: InferenceLaunch, devices: tuple[Device, ...]) -> FitPlan:
    """``--fit``'s choice for ``shape`` loaded with ``launch`` on a node with ``devices`` (see the module doc)."""
    used = offload_devices(devices, launch)
    if launch.fit == "off" or not used or launch.split_mode == "tensor" or shape.n_layer <= 0:
        return UNCHANGED
    free = {d.name: d.free_bytes for d in used}
    margin = dict(zip(free, margins(launch, len(used)), strict=True))
    # A GPU that reports no memory (0 of 0) is not fitted to, as llama.cpp: "--fit will not use it".
    unknown = {d.name for d in used if d.total_bytes <= 0}
    target = {name: (1 << 62) if name in unknown else free[name] - margin[name] for name in free}

    def use(n_ctx: int, layers: int | None) -> dict[str, int]:
        sized = launch if n_ctx <= 0 else replace(launch, n_ctx=n_ctx)
        parts = split_need(shape, sized, devices, layers)
        return {u.device: u.total_bytes for u in parts if u.device != HOST}

    def short(projected: dict[str, int]) -> list[str]:
        return [name for name in free if projected.get(name, 0) > target[name]]

    streams = _streams(launch)
    ctx_auto = launch.n_ctx <= 0
    ctx_max = max(shape.n_ctx_train, 0) * streams
    ctx_min = launch.fit_ctx * streams
    n_ctx = ctx_max if ctx_auto and ctx_max > 0 else launch.n_ctx
    first = short(use(n_ctx, None))
    if not first:
        return UNCHANGED
    changes: list[str] = []
    why = _why(first[0], free[first[0]], margin[first[0]])
    new_ctx = 0
    if ctx_auto and ctx_max > ctx_min:
        budget = sum(target.values())
        if len(used) > 1:  # only whole layers move: keep back half a layer per device, and one
            budget -= (len(used) + 1) * shape.weights_bytes // max(shape.n_layer + 1, 1) // 2
        new_ctx = _largest(ctx_min, ctx_max, KV_PAD * streams, lambda c: sum(use(c, None).values()) <= budget)
        changes.append(f"-c {ctx_max} -> {new_ctx}: the KV cache did not fit {why}")
        if not short(use(new_ctx, None)):
            return FitPlan(-1, new_ctx, tuple(changes))
    n_ctx = new_ctx or n_ctx
    if gpu_layers_number(launch.n_gpu_layers) != -1:
        return FitPlan(-1, new_ctx, (*changes, f"-ngl {launch.n_gpu_layers} kept (set by the user): {why}"))
    if len(used) > 1 and (launch.tensor_split or launch.split_mode == "row"):
        kept = "-ts" if launch.tensor_split else "-sm row"
        return FitPlan(-1, new_ctx, (*changes, f"layers kept ({kept} set by the user): {why}"))
    everything = layers_wanted(shape, launch)
    layers = _largest(0, everything, 1, lambda n: not short(use(n_ctx, n)))
    changes.append(f"-ngl auto -> {layers} of {everything} layers: the model did not fit {why}")
    return FitPlan(layers, new_ctx, tuple(changes))


def _largest(low: int, high: int, step: int, fits: Callable[[int], bool]) -> int:
    """The largest of ``low``, the multiples of ``step`` between, and ``high`` for which ``fits``
    holds (the need grows with the value), else ``low``: llama.cpp rounds a fitted context down to 256
    cells per stream, and counts layers one by one."""
    values = sorted({low, high, *range(-(-low // step) * step, high, step)})
    best, lo, hi = low, 0, len(values) - 1
    while lo <= hi:
        mid = (lo + hi) // 2
        if fits(values[mid]):
            best, lo = values[mid], mid + 1
        else:
            hi = mid - 1
    return best


def _why(name: str, free: int, margin: int) -> str:
    return f"{name}'s {free // MIB} MiB free with its {margin // MIB} MiB margin"
