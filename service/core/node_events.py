"""The cluster's events (nodes joining, leaving and lost) and a model's measured shape.

Kept beside :mod:`service.core.events`, which re-exports them and lists them in
its registry; the catalogue is ``docs/event-catalogue.md``. Pure: stdlib only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from service.core.devices import Stored
from service.core.event_base import Event


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeJoined(Event):
    """A ``modelrouter serve --node NAME`` started (one event per incarnation: a restarted node is a
    new ``incarnation``). ``memory_bytes`` is what its models may use: its RAM less the
    ``--models-memory-margin``; ``models`` the models whose files it holds as it joins;
    ``disk_free_bytes`` the free bytes of the file system its downloads go to (None: not measured,
    a node of an older version) and ``disk_reserve_bytes`` what its downloads must leave free there."""

    TYPE: ClassVar[str] = "node_joined"
    node: str
    incarnation: str
    url: str
    pid: int
    cpus: int
    ram_bytes: int
    memory_bytes: int
    models_max: int
    gpus: tuple[str, ...] = ()
    models: tuple[str, ...] = ()
    disk_free_bytes: int | None = None
    disk_reserve_bytes: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeDevicesMeasured(Event):
    """What compute devices a service found as it started (ggml's backend devices, measured by a
    child process that loads the worker's llama.cpp libraries): each a
    :meth:`~service.core.devices.Device.to_json` object (name, description, type, backend,
    total and free bytes). ``node`` is the ``--node`` name (None: a service without one).
    ``gpu_offload`` is ``llama_supports_gpu_offload()`` of that build; ``backends`` the
    backends its libraries carry (``CPU``, ``CUDA``, ``Vulkan``...)."""

    TYPE: ClassVar[str] = "node_devices_measured"
    node: str | None = None
    devices: tuple[Stored, ...] = ()
    gpu_offload: bool = False
    backends: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeLost(Event):
    """Another node (``detected_by``) took ``node``'s advisory lock: the connection that held it is
    gone, and so is that incarnation. Stored once per incarnation (a deterministic event id)."""

    TYPE: ClassVar[str] = "node_lost"
    node: str
    incarnation: str
    detected_by: str
    reason: str = "connection_lost"


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeLeft(Event):
    """``node`` stopped cleanly (SIGTERM, Ctrl-C): appended with its ``router_stopped``, after its
    workers stopped and before its advisory lock is let go, so the others find a left node and
    record no ``node_lost``. Stored once per incarnation (a deterministic event id)."""

    TYPE: ClassVar[str] = "node_left"
    node: str
    incarnation: str
    reason: str = "shutdown"


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelMeasured(Event):
    """What a model's GGUF header says about its memory need, read once when it is first placed
    (:mod:`service.core.memory` turns it into bytes for a given ``n_ctx``, ``n_parallel`` and
    cache type). ``weights_bytes`` is the files' size: llama.cpp maps the tensors as stored."""

    TYPE: ClassVar[str] = "model_measured"
    path: str
    weights_bytes: int
    n_layer: int
    n_embd: int
    n_head_kv: int
    n_embd_head_k: int
    n_embd_head_v: int
    n_vocab: int
    n_ctx_train: int
    sliding_window: int = 0  # 0: no sliding-window layers
    swa_layers: int = 0  # how many of the n_layer layers keep only the window
    embedding_bytes: int = 0  # token_embd's stored bytes (0: not read, as before issue 31)
    output_bytes: int = 0  # output.weight's (0 with layers_bytes: tied to the embeddings)
    layers_bytes: int = 0  # the repeating layers' (blk.*) together
