"""Where llama.cpp puts a model: ``llama_model_params``' offload fields from llama-server's flags.

``n_gpu_layers`` (``-ngl``: -1 auto, -2 all, or a count; llama.cpp offloads every layer for any
negative value), ``split_mode``/``main_gpu`` (``-sm``/``-mg``, set through the launch's
``llama_fields``), ``tensor_split`` (``-ts``: a float array of ``llama_max_devices()`` entries) and
``devices`` (``-dev``: a NULL-terminated ``ggml_backend_dev_t`` array; ``none`` is an array
holding only NULL, so nothing is offloaded). The arrays are C memory the params point at:
:func:`apply_placement` returns them, and the caller keeps them until the load returns.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any

from service.core.devices import Device
from workers.inference.llama._log import LoadError

JsonValue = int | float | bool | str | list[str] | list[float]


@dataclass(frozen=True, slots=True)
class Placement:
    """The offload fields a load sets: ``devices`` None leaves llama.cpp's (every GPU), ``("none",)``
    offloads nothing; ``tensor_split`` empty leaves llama.cpp's (by free memory)."""

    n_gpu_layers: int = -1
    tensor_split: tuple[float, ...] = ()
    devices: tuple[str, ...] | None = None


def device_handles(names: tuple[str, ...], known: tuple[Device, ...]) -> list[int | None]:
    """``-dev``'s names as ggml device handles, NULL-terminated, as llama-server's
    ``parse_device_list``: ``none`` is just the NULL; a name this build lacks, or a CPU device,
    fails the load with llama-server's words (``invalid device: NAME``)."""
    from workers.inference.llama._devices import device_handle

    if names == ("none",):
        return [None]
    kinds = {d.name: d.type for d in known}
    handles: list[int | None] = []
    for name in names:
        handle = device_handle(name)
        if handle is None or kinds.get(name, "cpu") == "cpu":
            raise LoadError("unsupported_option", f"invalid device: {name}")
        handles.append(handle)
    return [*handles, None]


def apply_placement(lc: Any, params: Any, placement: Placement) -> list[Any]:  # Any: llama_cpp's ctypes
    """Set ``placement`` on ``params`` (a ``llama_model_params``); returns the C arrays it points at,
    to keep alive until ``llama_model_load_from_file`` returns. Raises :class:`LoadError`."""
    params.n_gpu_layers = placement.n_gpu_layers
    keep: list[Any] = []
    if placement.tensor_split:
        n = int(lc.llama_max_devices())
        split = (ctypes.c_float * n)(*placement.tensor_split[:n])
        params.tensor_split = split
        keep.append(split)
    if placement.devices is not None:
        from workers.inference.llama._devices import devices

        handles = device_handles(placement.devices, devices())
        array = (ctypes.c_void_p * len(handles))(*handles)
        params.devices = ctypes.addressof(array)
        keep.append(array)
    return keep


def model_params_used(lc: Any, params: Any, placement: Placement) -> dict[str, JsonValue]:  # Any: ctypes
    """The offload fields of ``params`` as llama.cpp will read them (the worker's ``llama_params`` line)."""
    n = int(lc.llama_max_devices())
    split = [float(params.tensor_split[i]) for i in range(n)] if params.tensor_split else []
    while split and split[-1] == 0.0:
        split.pop()
    return {
        "n_gpu_layers": int(params.n_gpu_layers),
        "split_mode": int(params.split_mode),
        "main_gpu": int(params.main_gpu),
        "tensor_split": split,
        "devices": list(placement.devices) if placement.devices is not None else [],
    }


def context_params_used(params: Any) -> dict[str, JsonValue]:  # Any: a llama_context_params
    """The offload fields of a ``llama_context_params`` (``-nkvo``, ``--no-op-offload``, ``-fa``)."""
    return {
        "offload_kqv": bool(params.offload_kqv),
        "op_offload": bool(params.op_offload),
        "flash_attn_type": int(params.flash_attn_type),
    }
