"""A model's need split by device: what llama.cpp puts on each GPU for a launch, and what stays in RAM.

llama.cpp counts ``n_layer + 1`` offloadable layers, the repeating ones and the output layer (the
norm and the vocabulary's projection), and offloads the **last** ``n_gpu_layers`` of them; the token
embeddings (the input layer) always stay on the host (``src/llama-model.cpp``, "there is very little
benefit to offloading the input layer"). On each device:

* **weights**: its layers' share of the file: the stored bytes of the ``blk.*`` tensors, the output
  projection and the token embeddings, read from the header's tensor infos (``model_measured``'s
  ``layers_bytes``...). An output tied to the embeddings (Gemma's) stays on the host with them, and
  so does the logits' compute buffer. A shape measured before those parts were read shares the file
  out by parameter count: a repeating layer ``12 * n_embd**2``, the embeddings and the output
  ``n_vocab * n_embd`` each.
* **KV cache**: its layers' cells (:func:`~service.core.memory.kv_layout`), on the layer's device,
  or all of it in RAM with ``--no-kv-offload``.
* **compute buffer**: the attention phase where it has repeating layers, the logits phase where it
  has the output layer (:func:`~service.core.memory.compute_phases`); the host keeps one too, for
  the input layer (one micro-batch of embeddings) and for the layers left to it.

The devices (:func:`offload_devices`): ``-dev`` names them (``none``: none), else every discrete GPU
of the node in ggml's order, integrated ones only where there is no discrete one (llama.cpp's rule).
With several, ``-sm layer`` (the default) gives each a contiguous run of layers in proportion to
``-ts`` (unset: to each device's free memory, as llama.cpp); ``-sm none`` puts everything on
``-mg``; ``-sm row`` splits each layer's weights by ``-ts`` and keeps the KV cache and the compute
on ``-mg``; ``-sm tensor`` splits the weights and the KV cache by ``-ts``.

The host keeps the weights and the KV cache not offloaded, its own compute buffer and the worker's
overhead: without offload that is exactly :func:`~service.core.memory.estimate`'s total, so a node
without GPUs is judged as before; with offload, the devices' parts leave the host's.

Pure module: stdlib only.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from service.core.devices import HOST, Device, DeviceUse
from service.core.launch import InferenceLaunch, Params
from service.core.launch_devices import gpu_layers_number
from service.core.memory import WORKER_OVERHEAD, compute_phases, estimate, launch_of
from service.core.node_state import ModelShape

INPUT_BATCH = 512  # a micro-batch of embeddings: the host's compute buffer when every layer is offloaded


def offload_devices(devices: tuple[Device, ...], launch: InferenceLaunch) -> tuple[Device, ...]:
    """The devices the launch offloads to, in ggml's order (``-dev``, else the node's GPUs; ``-sm none``:
    ``-mg`` alone)."""
    offloading = [d for d in devices if d.offloads]
    if launch.device is not None:
        names = [n for n in launch.device.split(",") if n != "none"]
        by_name = {d.name: d for d in offloading}
        chosen = [by_name[n] for n in names if n in by_name]
    else:
        discrete = [d for d in offloading if d.type == "gpu"]
        chosen = discrete or offloading
    if launch.split_mode == "none" and chosen:
        return (chosen[launch.main_gpu if 0 <= launch.main_gpu < len(chosen) else 0],)
    return tuple(chosen)


def layers_wanted(shape: ModelShape, launch: InferenceLaunch) -> int:
    """``-ngl`` as layers to offload, of ``n_layer + 1`` (auto and all: every one)."""
    number = gpu_layers_number(launch.n_gpu_layers)
    return shape.n_layer + 1 if number < 0 else min(number, shape.n_layer + 1)


def shares(devices: tuple[Device, ...], launch: InferenceLaunch) -> tuple[float, ...]:
    """Each device's share of the split: ``-ts`` (missing values 0), or free memory when unset or all 0."""
    given = [float(v) for v in (launch.tensor_split or "").split(",") if v]
    given = (given + [0.0] * len(devices))[: len(devices)]
    if not any(given):
        given = [float(max(d.free_bytes, 0)) for d in devices]
    total = sum(given)
    return tuple(v / total for v in given) if total > 0 else tuple(1 / len(devices) for _ in devices)


def assign_layers(n_layer: int, gpu_layers: int, split: tuple[float, ...]) -> tuple[tuple[int, bool], ...]:
    """``(repeating layers, holds the output layer)`` per device, as llama.cpp's ``get_layer_buft_list``:
    the last ``gpu_layers`` of ``n_layer + 1``, layer ``il`` on the first device whose cumulative share
    exceeds ``(il - start) / gpu_layers``."""
    count = [0] * len(split)
    output = [False] * len(split)
    if not split or gpu_layers <= 0:
        return tuple(zip(count, output, strict=True))
    bounds, running = [], 0.0
    for share in split:
        running += share
        bounds.append(running)
    start = n_layer + 1 - gpu_layers
    for il in range(start, n_layer + 1):
        at = min(bisect.bisect_right(bounds, (il - start) / gpu_layers), len(split) - 1)
        if il == n_layer:
            output[at] = True
        else:
            count[at] += 1
    return tuple(zip(count, output, strict=True))


@dataclass(frozen=True, slots=True)
class WeightParts:
    """The file shared out by parameter count: each repeating layer, the input and the output layer."""

    layer: int
    embeddings: int
    output: int


def weight_parts(shape: ModelShape) -> WeightParts:
    """The measured tensors' bytes (``model_measured``'s parts; what is neither embeddings, output nor a
    layer, the norms, stays with the embeddings on the host), else the file shared by parameter count."""
    if shape.layers_bytes > 0 and shape.n_layer > 0:
        layer = shape.layers_bytes // shape.n_layer
        rest = shape.weights_bytes - shape.n_layer * layer - shape.output_bytes
        return WeightParts(layer=layer, embeddings=max(rest, 0), output=shape.output_bytes)
    layer_params = 12 * shape.n_embd * shape.n_embd
    vocab_params = shape.n_vocab * shape.n_embd
    total = max(shape.n_layer * layer_params + 2 * vocab_params, 1)
    per_param = shape.weights_bytes / total
    layer, vocab = int(layer_params * per_param), int(vocab_params * per_param)
    return WeightParts(layer=layer, embeddings=shape.weights_bytes - shape.n_layer * layer - vocab, output=vocab)


def split_need(
    shape: ModelShape,
    params: InferenceLaunch | Params,
    devices: tuple[Device, ...],
    gpu_layers: int | None = None,
) -> tuple[DeviceUse, ...]:
    """Each used device's need, then the host's (``HOST``: the weights and KV cache left to it, its
    compute buffer and the worker's overhead), for ``shape`` loaded with ``params`` on a node with ``devices``;
    ``gpu_layers`` overrides ``-ngl`` (``--fit``'s choice). A device given nothing is left out."""
    launch = launch_of(params)
    need = estimate(shape, launch)
    used = offload_devices(devices, launch)
    layers = layers_wanted(shape, launch) if gpu_layers is None or gpu_layers < 0 else gpu_layers
    layers = min(layers, shape.n_layer + 1)
    if not used or layers <= 0 or shape.n_layer <= 0:
        return (DeviceUse(HOST, need.weights, need.kv_cache, need.compute + need.overhead),)
    split = shares(used, launch)
    main = launch.main_gpu if 0 <= launch.main_gpu < len(used) else 0
    attention, logits = compute_phases(shape, launch)
    parts = weight_parts(shape)
    kv_layer = need.kv_cache / shape.n_layer
    placed = assign_layers(shape.n_layer, layers, split)
    offloaded = sum(n for n, _ in placed)
    # Tied to the embeddings (measured, no output tensor), the projection stays with them on the host,
    # and so does the logits' compute buffer, whatever -ngl says.
    tied = shape.layers_bytes > 0 and shape.output_bytes == 0
    has_output = any(out for _, out in placed) and not tied
    weights = offloaded * parts.layer + (parts.output if has_output else 0)
    uses: list[DeviceUse] = []
    for index, device in enumerate(used):
        n, out = placed[index]
        if launch.split_mode in ("row", "tensor"):  # every layer's weights cut by -ts
            model = int(weights * split[index])
            kv_share = split[index] if launch.split_mode == "tensor" else float(index == main)
            kv = int(offloaded * kv_layer * kv_share)
            on_main = launch.split_mode == "tensor" or index == main
            compute = max(attention if offloaded else 0, logits if has_output else 0) if on_main else 0
        else:
            out = out and not tied
            model = n * parts.layer + (parts.output if out else 0)
            kv = int(n * kv_layer)
            compute = max(attention if n else 0, logits if out else 0)
        if not launch.kv_offload:
            kv = 0
        if model or kv or compute:
            uses.append(DeviceUse(device.name, model, kv, compute))
    host_layers = shape.n_layer - offloaded
    host_compute = max(4 * INPUT_BATCH * shape.n_embd, attention if host_layers else 0, 0 if has_output else logits)
    device_kv = sum(u.kv_bytes for u in uses)
    host = DeviceUse(
        HOST,
        model_bytes=need.weights - sum(u.model_bytes for u in uses),
        kv_bytes=need.kv_cache - device_kv,
        compute_bytes=host_compute + WORKER_OVERHEAD,
    )
    return (*uses, host)


def device_bytes(uses: tuple[DeviceUse, ...]) -> dict[str, int]:
    """Bytes by device name (``HOST`` among them)."""
    return {use.device: use.total_bytes for use in uses}


def host_bytes(uses: tuple[DeviceUse, ...]) -> int:
    """The host's part: what the node's RAM budget is checked against."""
    return sum(use.total_bytes for use in uses if use.device == HOST)
