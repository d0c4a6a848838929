"""The launch's device rows: llama-server's offload and fit options (``-ngl``, ``-sm``, ``-ts``,
``-mg``, ``-dev``, ``--op-offload``, ``--mmproj-offload``, ``--fit``, ``-fitt``, ``-fitc``).

:class:`DeviceOptions` is the base of :class:`~service.core.launch.InferenceLaunch`: its fields are
rows of the same option table (declared with :func:`~service.core.launch_rows.option`), kept here
because they are one idea, where the model's layers and buffers go. The defaults are llama-server's
(``common/common.h`` at the vendored commit): every layer that fits offloaded (``-ngl auto`` with
``--fit on``), layers split across GPUs, a 1024 MiB margin per device, a context no smaller than
4096 when ``--fit`` shrinks it.

Pure module: stdlib only.
"""

from __future__ import annotations

from dataclasses import dataclass

from service.core.launch_rows import option

SPLIT_MODES = {"none": 0, "layer": 1, "row": 2, "tensor": 3}
"""``llama_split_mode`` values by ``--split-mode`` name."""
FIT_TARGET_MIB = 1024
"""llama-server's ``--fit-target`` default: MiB left free on each device."""
FIT_CTX_MIN = 4096
"""llama-server's ``--fit-ctx`` default: the smallest context ``--fit`` sets."""


def gpu_layers(value: str) -> str:
    """llama-server's ``-ngl`` value: ``auto`` (-1), ``all`` (-2 or less) or a count of layers."""
    word = value.strip().lower()
    if word in ("auto", "all"):
        return word
    try:
        count = int(word)
    except ValueError:
        msg = f"invalid value for --gpu-layers: '{value}' (a number, 'auto' or 'all')"
        raise ValueError(msg) from None
    return "auto" if count == -1 else "all" if count < -1 else str(count)


def gpu_layers_number(value: str) -> int:
    """``-ngl`` as llama.cpp's ``n_gpu_layers``: -1 auto, -2 all, else the count."""
    return {"auto": -1, "all": -2}.get(value, int(value) if value.lstrip("-").isdigit() else -1)


def _numbers(value: str, flag: str, parse: type[float] | type[int]) -> str:
    """A list split at ``,`` or ``/`` as llama-server splits ``-ts`` and ``-fitt``, normalised to commas."""
    parts = [p.strip() for p in value.replace("/", ",").split(",") if p.strip()]
    try:
        numbers = [parse(p) for p in parts]
    except ValueError:
        msg = f"invalid value for {flag}: '{value}'"
        raise ValueError(msg) from None
    if not numbers or any(n < 0 for n in numbers):
        msg = f"invalid value for {flag}: '{value}'"
        raise ValueError(msg)
    return ",".join(str(n) for n in numbers)


def tensor_split(value: str) -> str:
    """``-ts 3,1``: the share of the model on each device, in device order."""
    return _numbers(value, "--tensor-split", float)


def fit_target(value: str) -> str:
    """``-fitt MiB0,MiB1,...``: MiB to leave free per device (one value: every device)."""
    return _numbers(value, "--fit-target", int)


def device_list(value: str) -> str:
    """``-dev dev1,dev2`` (``none``: offload nothing), as given: the worker checks the names against
    its devices, as llama-server does when it parses the flag."""
    names = [n.strip() for n in value.split(",") if n.strip()]
    if not names:
        msg = "no devices specified"
        raise ValueError(msg)
    return ",".join(names)


def on_off(value: str) -> str:
    """``--fit on|off`` (llama.cpp's truthy and falsey words)."""
    word = value.strip().lower()
    if word in ("on", "enabled", "true", "1"):
        return "on"
    if word in ("off", "disabled", "false", "0"):
        return "off"
    msg = f"unknown value for --fit: '{value}'"
    raise ValueError(msg)


@dataclass(frozen=True, slots=True, kw_only=True)
class DeviceOptions:
    """Where the model's layers, KV cache and compute go: llama-server's offload and fit options."""

    n_gpu_layers: str = option(
        "auto",
        "--n-gpu-layers -ngl --gpu-layers",
        "model",
        "n-gpu-layers",
        "LLAMA_ARG_N_GPU_LAYERS",
        parse=gpu_layers,
        help="layers in VRAM: a number, 'auto' (as many as fit) or 'all'",
    )
    split_mode: str = option(
        "layer",
        "--split-mode -sm",
        "model",
        "split-mode",
        "LLAMA_ARG_SPLIT_MODE",
        choices=SPLIT_MODES,
        llama="split_mode",
        help="how to split the model across GPUs: none, layer, row or tensor",
    )
    tensor_split: str | None = option(
        None,
        "--tensor-split -ts",
        "model",
        "tensor-split",
        "LLAMA_ARG_TENSOR_SPLIT",
        parse=tensor_split,
        help="share of the model on each GPU, e.g. 3,1",
    )
    main_gpu: int = option(
        0,
        "--main-gpu -mg",
        "model",
        "main-gpu",
        "LLAMA_ARG_MAIN_GPU",
        parse=int,
        llama="main_gpu",
        help="the GPU for the whole model (-sm none), or for intermediate results and KV (-sm row)",
    )
    device: str | None = option(
        None,
        "--device -dev",
        "model",
        "device",
        "LLAMA_ARG_DEVICE",
        parse=device_list,
        help="comma-separated devices to offload to (none: offload nothing); see --list-devices",
    )
    op_offload: bool = option(
        True,
        "--op-offload",
        "context",
        "op-offload",
        llama="op_offload",
        help="offload host tensor operations to the device",
    )
    mmproj_offload: bool = option(
        True,
        "--mmproj-offload",
        "model",
        "mmproj-offload",
        "LLAMA_ARG_MMPROJ_OFFLOAD",
        help="the multimodal projector on the GPU",
    )
    fit: str = option(
        "on",
        "--fit -fit",
        "model",
        "fit",
        "LLAMA_ARG_FIT",
        parse=on_off,
        help="lower unset -ngl and -c until the model fits the devices' free memory",
    )
    fit_target: str = option(
        str(FIT_TARGET_MIB),
        "--fit-target -fitt",
        "model",
        "fit-target",
        "LLAMA_ARG_FIT_TARGET",
        parse=fit_target,
        help="MiB --fit leaves free on each device (one value: every device)",
    )
    fit_ctx: int = option(
        FIT_CTX_MIN,
        "--fit-ctx -fitc",
        "model",
        "fit-ctx",
        "LLAMA_ARG_FIT_CTX",
        parse=int,
        help="the smallest context --fit sets",
    )
