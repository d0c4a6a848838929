"""``GET /models``: llama.cpp router's entry shape plus download progress,
the instance and the last error."""

from __future__ import annotations

from typing import Any, Literal

import msgspec
from msgspec import UNSET, UnsetType

from service.api.schemas._offload import GpuLayersView, OffloadView
from service.core.events import ServerMeta
from service.core.state import FailureJSON

ModelStatusValue = Literal[
    "downloading", "unloaded", "loading", "loaded", "unloading", "unresponsive", "failed", "sleeping", "absent"
]
InstanceState = Literal["starting", "loading", "ready", "stopping"]
JobStatusValue = Literal["queued", "running", "cancelling", "finished", "failed", "cancelled", "interrupted"]


class ProgressView(msgspec.Struct, frozen=True):
    """A downloading model's job progress."""

    job_id: str
    job_status: JobStatusValue
    bytes_done: int
    bytes_total: int
    fraction: float
    bytes_per_second: float | None
    eta_seconds: float | None
    node: str | UnsetType = UNSET
    """Ours, in a cluster: the node whose worker downloads it."""


class FilesOnView(msgspec.Struct, frozen=True):
    """Ours, in a cluster: one node's copy of a model's files, and whether that node is ``up``,
    ``lost`` or ``left`` (a copy only gone nodes hold is downloaded again on the next request)."""

    node: str
    state: Literal["up", "lost", "left"]
    path: str | None
    size: int


class EngineStatsView(msgspec.Struct, frozen=True):
    """The batch engine's load as its worker last reported it (``instance_stats``, at most
    every few seconds, only when it changed): slots busy of slots total, requests
    waiting for a slot, and average prefill / decode throughput over finished requests."""

    slots_total: int
    slots_busy: int
    queue_depth: int
    prefill_tokens_per_s: float
    decode_tokens_per_s: float
    requests_finished: int
    updated_at: str


class InstanceView(msgspec.Struct, frozen=True):
    """The model's inference worker while it starts, serves or stops."""

    instance_id: str
    state: InstanceState
    pid: int | None
    endpoint: str | None
    progress: float
    load_ms: float | None
    n_ctx: int | None
    args: dict[str, Any]  # free-form: the launch options by name, as instance_requested recorded them
    engine: EngineStatsView | UnsetType = UNSET


class ModelStatusView(msgspec.Struct, frozen=True):
    """``status``: ``value`` always; the rest only when it applies."""

    value: ModelStatusValue
    args: list[str] = msgspec.field(default_factory=list)
    """llama.cpp's: the model's llama-server options in force, as a command line."""
    preset: str = ""
    """llama.cpp's: the same options as a preset section (INI text)."""
    progress: ProgressView | UnsetType = UNSET
    instance: InstanceView | UnsetType = UNSET
    failed: bool | UnsetType = UNSET
    error: FailureJSON | UnsetType = UNSET
    exit_code: int | UnsetType = UNSET
    node: str | UnsetType = UNSET
    """Ours, in a cluster: the node whose worker runs it."""


class ModelArchitecture(msgspec.Struct, frozen=True):
    """llama.cpp's ``architecture``: what the model takes and gives (a projector adds
    ``image`` and/or ``audio``, as its header says)."""

    input_modalities: list[Literal["text", "image", "audio"]]
    output_modalities: list[Literal["text"]]


class PromptCacheFileView(msgspec.Struct, frozen=True):
    """One saved prompt-cache file: its name as its worker recorded it, and its last save and restore."""

    file: str
    tokens: int
    bytes: int
    saved_at: str | None
    restored_at: str | None


class PromptCacheView(msgspec.Struct, frozen=True):
    """A model's saved prompt cache on disk (issue 35): its files, their bytes and tokens in all."""

    files: list[PromptCacheFileView]
    bytes: int
    tokens: int


class ModelEntry(msgspec.Struct, frozen=True):
    """One entry of ``GET /models``."""

    id: str
    aliases: list[str]
    tags: list[str]
    object: Literal["model"]
    owned_by: str
    created: int
    status: ModelStatusView
    architecture: ModelArchitecture
    source: str
    can_remove: bool
    path: str | None
    size: int
    last_used: str | None
    last_error: FailureJSON | None
    memory: dict[str, Any] | msgspec.UnsetType = msgspec.UNSET  # free-form here: service.core.memory's parts
    """Ours: the estimated need once loaded (``total_bytes`` and its parts), once the header was read."""
    pinned: bool | msgspec.UnsetType = msgspec.UNSET
    """Ours: the preset's ``pin = true`` (never evicted); absent when false."""
    held_by: list[str] | msgspec.UnsetType = msgspec.UNSET
    """Ours, in a cluster: the nodes that hold the model's files (``status.node`` says where it runs)."""
    files_on: list[FilesOnView] | msgspec.UnsetType = msgspec.UNSET
    """Ours, in a cluster: each copy of the files, by node, with that node's state."""
    meta: ServerMeta | msgspec.UnsetType = msgspec.UNSET
    """llama-server's, while the model is loaded: ``vocab_type``, ``n_vocab``, ``n_ctx``, ``n_ctx_train``,
    ``n_embd``, ``n_params``, ``size``, ``ftype``, as its worker's ``instance_ready`` recorded them."""
    offload: OffloadView | None = None
    """Ours, while a worker holds the model: where it put it (layers offloaded, devices, the memory on
    each, ``CPU`` for host memory), as its ``instance_ready`` said; null when not loaded or not said."""
    gpu_layers: GpuLayersView | None = None
    """Ours, with ``offload``: ``-ngl`` as requested, layers offloaded of the model's total; null likewise."""
    prompt_cache: PromptCacheView | msgspec.UnsetType = msgspec.UNSET
    """Ours: the prompt cache its workers saved on disk and the next load restores; absent when none."""


class SingleModelDetails(msgspec.Struct, frozen=True):
    parent_model: str = ""
    format: str = "gguf"
    family: str = ""
    families: list[str] = msgspec.field(default_factory=lambda: [""])
    parameter_size: str = ""
    quantization_level: str = ""


class SingleModel(msgspec.Struct, frozen=True):
    """llama-server's single-model ``models`` entry (``get_res_models``): a name and capabilities, the
    rest empty (it manages no hashes)."""

    name: str
    model: str
    modified_at: str = ""
    size: str = ""
    digest: str = ""
    type: str = "model"
    description: str = ""
    tags: list[str] = msgspec.field(default_factory=lambda: [""])
    capabilities: list[str] = msgspec.field(default_factory=lambda: ["completion"])
    parameters: str = ""
    details: SingleModelDetails = msgspec.field(default_factory=SingleModelDetails)


class ModelList(msgspec.Struct, frozen=True):
    """``GET /models`` and ``GET /v1/models`` (OpenAI's list shape)."""

    object: Literal["list"]
    data: list[ModelEntry]
    models: list[SingleModel] | msgspec.UnsetType = msgspec.UNSET
    """llama-server's, in single-model mode: its model in Ollama's list shape (``get_res_models``)."""
