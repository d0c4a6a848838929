"""Pure rendering of the fold into wire types (llama.cpp router shapes where they exist).

One read beside the fold: a projector's modalities come from its file's header (cached)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, Literal, TypedDict

from msgspec import UNSET, UnsetType

from service.api.schemas import (
    DeviceUseView,
    EngineStatsView,
    FilesOnView,
    FileView,
    GpuLayersView,
    InstanceView,
    JobView,
    ModelArchitecture,
    ModelEntry,
    ModelList,
    ModelStatusView,
    OffloadView,
    ProgressView,
    PromptCacheFileView,
    PromptCacheView,
    SingleModel,
)
from service.core.devices import Offload
from service.core.draft_source import draft_need
from service.core.event_base import JSON
from service.core.events import FileRef, ServerMeta
from service.core.memory import estimate
from service.core.model_spec import projector_path
from service.core.server_mode import ROUTER, ServerMode, listed, listed_aliases, served_name
from service.core.state import DownloadJob, InstanceStatus, ModelState, ModelStatus, RouterState
from service.event_store.codec import format_time
from service.llamacpp.options import command_line, model_tags, preset_ini
from service.llamacpp.projector_caps import projector_caps

TEXT_ONLY = ModelArchitecture(input_modalities=["text"], output_modalities=["text"])


def architecture(files: Any) -> ModelArchitecture:
    """llama.cpp's router: ``input_modalities`` from the model's mmproj (images, audio or both);
    the projector's header is read once per file version (:mod:`service.llamacpp.projector_caps`)."""
    path = projector_path(files)
    if path is None:
        return TEXT_ONLY
    caps = projector_caps(path)
    inputs: list[Literal["text", "image", "audio"]] = ["text"]
    inputs += ["image"] if caps.vision else []
    inputs += ["audio"] if caps.audio else []
    return ModelArchitecture(input_modalities=inputs, output_modalities=["text"])


def time_or_none(moment: datetime | None) -> str | None:
    """ISO-8601 UTC, or None."""
    return format_time(moment) if moment is not None else None


def file_view(file: FileRef) -> FileView:
    """One file of a job's listing."""
    return FileView(path=file.path, size=file.size, sha256=file.sha256)


def job_view(job: DownloadJob) -> JobView:
    """``GET /downloads/{job_id}``."""
    return JobView(
        job_id=job.job_id,
        model=job.model,
        status=job.status.value,
        repo=job.repo,
        revision=job.revision,
        commit=job.commit,
        files=[file_view(f) for f in job.files],
        bytes_done=job.bytes_done,
        bytes_total=job.bytes_total,
        bytes_per_second=job.bytes_per_second,
        eta_seconds=job.eta_seconds,
        pid=job.pid,
        requested_at=time_or_none(job.requested_at),
        started_at=time_or_none(job.started_at),
        finished_at=time_or_none(job.finished_at),
        error=job.error.to_json() if job.error else None,
        node=UNSET if job.node is None else job.node,
    )


def _progress(model: ModelState, state: RouterState) -> ProgressView | None:
    job = state.job(model.active_job) if model.status is ModelStatus.DOWNLOADING and model.active_job else None
    if job is None:
        return None
    fraction = job.bytes_done / job.bytes_total if job.bytes_total else 0.0
    return ProgressView(
        job_id=job.job_id,
        job_status=job.status.value,
        bytes_done=job.bytes_done,
        bytes_total=job.bytes_total,
        fraction=round(fraction, 4),
        bytes_per_second=job.bytes_per_second,
        eta_seconds=job.eta_seconds,
        node=UNSET if job.node is None else job.node,
    )


def _instance(model: ModelState) -> InstanceView | None:
    inst = model.instance
    if inst is None:
        return None
    stats = inst.stats
    engine: EngineStatsView | UnsetType = UNSET
    if stats is not None:
        engine = EngineStatsView(
            slots_total=stats.slots_total,
            slots_busy=stats.slots_busy,
            queue_depth=stats.queue_depth,
            prefill_tokens_per_s=stats.prefill_tokens_per_s,
            decode_tokens_per_s=stats.decode_tokens_per_s,
            requests_finished=stats.requests_finished,
            updated_at=format_time(stats.at),
        )
    return InstanceView(
        instance_id=inst.instance_id,
        state=inst.status.value,
        pid=inst.pid,
        endpoint=inst.endpoint or None,
        progress=inst.progress,
        load_ms=inst.load_ms,
        n_ctx=inst.n_ctx,
        args=dict(inst.params),
        engine=engine,
    )


def _status(model: ModelState, state: RouterState) -> ModelStatusView:
    hung = model.status is ModelStatus.UNRESPONSIVE  # its reason shows while the worker is being killed
    failure = model.last_error if model.failed or hung else None
    error = failure.to_json() if failure is not None else None
    # As a shell shows it (128 + the signal for a worker killed by one), llama.cpp's non-zero status.
    exit_code = None if failure is None else failure.exit_code if failure.status_code is None else failure.status_code
    progress, instance = _progress(model, state), _instance(model)
    return ModelStatusView(
        value=model.status.value,
        args=command_line(model.config.args),
        preset=preset_ini(model.name, model.config.args),
        progress=UNSET if progress is None else progress,
        instance=UNSET if instance is None else instance,
        failed=True if model.failed else UNSET,
        error=UNSET if error is None else error,
        exit_code=UNSET if exit_code is None else int(exit_code),
        node=UNSET if model.instance is None or model.instance.node is None else model.instance.node,
    )


def _with_draft(memory: dict[str, JSON], draft: int) -> dict[str, JSON]:
    """The ``memory`` object with the draft model's bytes (``-hfd``/``-md``), placed with the model."""
    if not draft:
        return memory
    total = memory["total_bytes"]
    assert isinstance(total, int)
    return {**memory, "total_bytes": total + draft, "draft_bytes": draft}


def model_view(model: ModelState, state: RouterState, mode: ServerMode = ROUTER) -> ModelEntry:
    """One entry of ``GET /models``: llama.cpp's shape plus progress, errors and the memory need
    (in single-model mode the one model under its ``--alias`` id, as llama-server lists it)."""
    need = None if model.shape is None else estimate(model.shape, model.config.params, model.config.args)
    offload = model.instance.offload if model.instance is not None else None
    return ModelEntry(
        id=served_name(mode, model.name),
        aliases=listed_aliases(mode, model.name, model.aliases),
        tags=model_tags(model.config.args),
        object="model",
        owned_by="modelrouter",
        created=int(model.created_at.timestamp()) if model.created_at else 0,
        status=_status(model, state),
        architecture=architecture(model.files),
        source=model.source,
        can_remove=model.source == "cache" and model.available,
        path=model.path,
        size=model.size,
        last_used=time_or_none(model.last_used),
        last_error=model.last_error.to_json() if model.last_error else None,
        memory=UNSET if need is None else _with_draft(need.to_json(), draft_need(state, model)),
        pinned=True if model.config.pinned else UNSET,
        held_by=sorted(model.holders) if model.holders else UNSET,
        files_on=_files_on(model, state) if model.holders else UNSET,
        meta=_loaded_meta(model),
        offload=offload_view(offload),
        gpu_layers=None if offload is None else GpuLayersView(offload.requested, offload.offloaded, offload.layers),
        prompt_cache=prompt_cache_view(model),
    )


def prompt_cache_view(model: ModelState) -> PromptCacheView | UnsetType:
    """``prompt_cache`` of a ``GET /models`` entry: the saved files the log knows, oldest save first."""
    if not model.prompt_cache:
        return UNSET
    entries = sorted(model.prompt_cache.values(), key=lambda e: (time_or_none(e.saved_at) or "", e.file))
    files = [
        PromptCacheFileView(e.file, e.tokens, e.bytes, time_or_none(e.saved_at), time_or_none(e.restored_at))
        for e in entries
    ]
    return PromptCacheView(files=files, bytes=sum(e.bytes for e in entries), tokens=sum(e.tokens for e in entries))


def offload_view(offload: Offload | None) -> OffloadView | None:
    """``offload`` of a ``GET /models`` entry: :meth:`Offload.to_json`'s shape, typed."""
    if offload is None:
        return None
    memory = [
        DeviceUseView(u.device, u.model_bytes, u.kv_bytes, u.compute_bytes, u.total_bytes) for u in offload.memory
    ]
    return OffloadView(
        requested=offload.requested,
        gpu_layers=offload.gpu_layers,
        offloaded=offload.offloaded,
        layers=offload.layers,
        devices=list(offload.devices),
        memory=memory,
        fit=list(offload.fit),
    )


def _files_on(model: ModelState, state: RouterState) -> list[FilesOnView]:
    """Each node's copy of ``model``'s files, with that node's state (a holder not joined yet: up)."""
    out = []
    for name, held in sorted(model.holders.items()):
        node = state.nodes.get(name)
        out.append(FilesOnView(node=name, state="up" if node is None else node.state, path=held.path, size=held.size))
    return out


def _loaded_meta(model: ModelState) -> ServerMeta | UnsetType:
    """llama-server's ``meta`` of a loaded model, as its worker's ``instance_ready`` gave it."""
    inst = model.instance
    if inst is None or inst.status is not InstanceStatus.READY or not inst.model_info:
        return UNSET
    return dict(inst.model_info)


def models_view(
    state: RouterState, mode: ServerMode = ROUTER, shown: Callable[[ModelState], bool] = lambda _: True
) -> ModelList:
    """``GET /models`` and ``GET /v1/models``; in single-model mode its one model only, also in
    llama-server's Ollama-shaped ``models`` list; ``shown``: the caller's scope (issue 34)."""
    data = [
        model_view(m, state, mode)
        for name, m in sorted(state.models.items())
        if m.listed and not m.config.hidden and listed(mode, name) and shown(m)
    ]
    if not mode.single or len(data) != 1:
        return ModelList(object="list", data=data)
    multimodal = bool({"image", "audio"} & set(data[0].architecture.input_modalities))
    return ModelList(object="list", data=data, models=[ollama_entry(data[0].id, multimodal)])


def ollama_entry(name: str, multimodal: bool) -> SingleModel:
    """llama-server's single-model ``models`` entry (``get_res_models``)."""
    capabilities = ["completion", "multimodal"] if multimodal else ["completion"]
    return SingleModel(name=name, model=name, capabilities=capabilities)


_WORKER_SLOTS = 4  # the inference worker's --n-parallel default, when the model's options set none


class _Settings(TypedDict):
    params: dict[str, object]  # empty: the worker's own settings were not kept
    n_ctx: int


class _Modalities(TypedDict):
    vision: bool
    video: bool
    audio: bool


class SleepingProps(TypedDict):
    """llama-server's ``GET /props`` as far as the log knows it (a sleeping model's)."""

    default_generation_settings: _Settings
    total_slots: object  # the preset's n_parallel as it was set
    model_alias: str
    model_path: str
    modalities: _Modalities
    endpoint_slots: bool
    endpoint_props: bool
    endpoint_metrics: bool
    chat_template: str
    bos_token: str
    eos_token: str
    build_info: str
    is_sleeping: bool


def sleeping_props(model: ModelState, build_info: str, alias: str) -> SleepingProps:
    """``GET /props`` of a sleeping model whose worker's own answer was not kept (the service restarted
    while it slept): llama-server's shape, from what the log knows; ``is_sleeping: true``; ``alias``:
    the name it answers under (:func:`~service.core.server_mode.served_name`)."""
    params = model.config.params
    return {
        "default_generation_settings": {"params": {}, "n_ctx": model.asleep_n_ctx or 0},
        "total_slots": params.get("n_parallel") or _WORKER_SLOTS,
        "model_alias": alias,
        "model_path": model.path or "",
        "modalities": {"vision": False, "video": False, "audio": False},
        "endpoint_slots": params.get("endpoint_slots") is not False,
        "endpoint_props": False,
        "endpoint_metrics": bool(params.get("endpoint_metrics")),
        "chat_template": "",
        "bos_token": "",
        "eos_token": "",
        "build_info": build_info,
        "is_sleeping": True,
    }
