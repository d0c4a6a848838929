"""The cluster's part of the fold: nodes, which node holds a model's files, a model's shape.

Values only (see :mod:`service.core.state`, which uses them); the handlers are
:mod:`service.core.fold_nodes`. Pure: stdlib only.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from service.core.event_base import FileRef


@dataclass(frozen=True, slots=True)
class NodeState:
    """One incarnation of a node, as its ``node_joined`` said; ``lost`` once another node found
    its lock free (``node_lost``), ``left`` once it said it stopped cleanly (``node_left``).
    ``disk_free``: the free bytes its ``node_joined`` measured where its downloads go, less what its
    download workers wrote since (``download_finished``) plus what its removals freed
    (``model_removed``); None: not measured."""

    name: str
    incarnation: str
    url: str
    pid: int = 0
    cpus: int = 0
    ram_bytes: int = 0
    memory_bytes: int = 0
    models_max: int = 0
    gpus: tuple[str, ...] = ()
    disk_free: int | None = None
    disk_reserve: int = 0
    joined_at: datetime | None = None
    lost: bool = False
    lost_at: datetime | None = None
    lost_by: str | None = None
    left: bool = False
    left_at: datetime | None = None

    @property
    def gone(self) -> bool:
        """Lost or left: no longer a node to place on, nor to watch."""
        return self.lost or self.left

    @property
    def state(self) -> Literal["up", "lost", "left"]:
        """``up``, ``left`` or ``lost``, as ``GET /nodes`` shows it."""
        return "left" if self.left else "lost" if self.lost else "up"


@dataclass(frozen=True, slots=True)
class Holding:
    """A model's files on one node (its own cache or models dir)."""

    path: str | None
    files: tuple[FileRef, ...] = ()
    size: int = 0


@dataclass(frozen=True, slots=True)
class ModelShape:
    """The GGUF header facts a memory estimate needs (``model_measured``)."""

    path: str
    weights_bytes: int
    n_layer: int
    n_embd: int
    n_head_kv: int
    n_embd_head_k: int
    n_embd_head_v: int
    n_vocab: int
    n_ctx_train: int
    sliding_window: int = 0
    swa_layers: int = 0
    # The file's tensors by where llama.cpp puts them (their stored bytes; all 0: not read, an older
    # model_measured): the token embeddings (always the host's), the output projection (0 with
    # layers_bytes > 0: tied to the embeddings, so the logits are computed on the host) and the
    # n_layer repeating layers (blk.*) together.
    embedding_bytes: int = 0
    output_bytes: int = 0
    layers_bytes: int = 0
