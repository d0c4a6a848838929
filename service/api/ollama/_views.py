"""Pure rendering of the fold (plus each file's GGUF header) into Ollama's answers."""

from __future__ import annotations

import hashlib
from datetime import datetime, timedelta

import service.api.ollama._schemas as o
from service.api.ollama._gguf import GgufFacts, gguf_facts, parameter_size
from service.core.scheduling import idle_limit
from service.core.state import InstanceStatus, ModelState, RouterState
from service.event_store.codec import format_time

FOREVER = timedelta(microseconds=(2**63 - 1) // 1000)
"""What Ollama adds for ``keep_alive: -1`` (Go's largest duration, ~292 years): its ``expires_at``."""
_EPOCH = "1970-01-01T00:00:00Z"
_SHOWN = (InstanceStatus.STARTING, InstanceStatus.LOADING, InstanceStatus.READY)


def _is_projector(path: str) -> bool:
    return "mmproj" in path.rsplit("/", 1)[-1].lower()


def digest(model: ModelState) -> str:
    """The GGUF's sha256 (the Hub's LFS id, which names its blob in the cache); for a local file
    whose hash nobody recorded, a stable id of its path and size instead of hashing gigabytes
    on every listing (docs/ollama-compat.md)."""
    for f in model.files:
        if f.sha256 and not _is_projector(f.path):
            return f.sha256
    return hashlib.sha256(f"{model.path}\0{model.size}".encode()).hexdigest()


def details(model: ModelState, facts: GgufFacts) -> o.Details:
    """Ollama's ``details``: from the header, the quantization from the name's tag when the header has none."""
    family = facts.architecture
    tag = model.name.rsplit(":", 1)[1] if ":" in model.name else ""
    return o.Details(
        parent_model="",
        format="gguf",
        family=family,
        families=[family] if family else [],
        parameter_size=parameter_size(facts.parameter_count) if facts.parameter_count else "",
        quantization_level=facts.quantization or tag.upper(),
    )


def _modified(model: ModelState) -> str:
    return format_time(model.created_at) if model.created_at else _EPOCH


def on_disk(state: RouterState) -> list[ModelState]:
    """The models ``/api/tags`` lists: files on disk, listed in ``/models`` too."""
    return [m for _, m in sorted(state.models.items()) if m.available and m.path and m.listed and not m.config.hidden]


def tags_view(state: RouterState) -> o.TagList:
    """``GET /api/tags``: one entry per name, as Ollama lists a copy beside its source: a model's own
    name, then its aliases (its presets', then those ``/api/copy`` gave), the same file behind each."""
    models = []
    for m in on_disk(state):
        facts = gguf_facts(m.path)
        shown = details(m, facts)
        for name in (m.name, *m.aliases):
            models.append(
                o.ListedModel(
                    name=name, model=name, modified_at=_modified(m), size=m.size, digest=digest(m), details=shown
                )
            )
    return o.TagList(models=models)


def expires_at(model: ModelState, now: datetime) -> str:
    """When the idle limit (an Ollama ``keep_alive``, else the model's TTL) unloads the model if
    no request comes; Ollama's far future when nothing will."""
    inst = model.instance
    last = model.last_used or (inst.ready_at if inst else None) or now
    limit = idle_limit(model)
    return format_time(last + (FOREVER if limit is None else timedelta(seconds=limit)))


def memory_sizes(model: ModelState) -> tuple[int, int]:
    """Ollama's ``size`` and ``size_vram``: the memory the loaded model takes (every device's buffers,
    host memory included) and the part of it on GPUs, as its worker's ``instance_ready.offload`` said.
    Until a worker says (a log from before issue 31, or a worker still loading): the file's size, none of it in VRAM."""
    offload = model.instance.offload if model.instance is not None else None
    total = sum(use.total_bytes for use in offload.memory) if offload is not None else 0
    if offload is None or total <= 0:
        return model.size, 0
    return total, offload.device_bytes


def ps_view(state: RouterState, now: datetime) -> o.RunningList:
    """``GET /api/ps``: the models with a live worker, with the memory each takes and the part in
    VRAM (:func:`memory_sizes`): Ollama's ``ollama ps`` shows "100% CPU" when it is 0."""
    running = []
    for _, m in sorted(state.models.items()):
        inst = m.instance
        if inst is None or inst.status not in _SHOWN:
            continue
        facts = gguf_facts(m.path)
        size, size_vram = memory_sizes(m)
        running.append(
            o.RunningModel(
                name=m.name,
                model=m.name,
                size=size,
                digest=digest(m),
                details=details(m, facts),
                expires_at=expires_at(m, now),
                size_vram=size_vram,
                context_length=inst.n_ctx or 0,
            )
        )
    return o.RunningList(models=running)


def capabilities(model: ModelState, facts: GgufFacts) -> list[str]:
    """What ``/api/show`` says the model can do here. ``embedding`` for every model: the engine
    embeds with any model (a second context), as Ollama does; ``completion`` unless the header
    says it is an embedding model (a pooling type); ``tools`` when the chat template knows them;
    ``vision`` with a projector file."""
    found = [] if f"{facts.architecture}.pooling_type" in facts.metadata else ["completion"]
    found.append("embedding")
    if "tools" in facts.chat_template:
        found.append("tools")
    if any(_is_projector(f.path) for f in model.files):
        found.append("vision")
    return found


def _parameters(model: ModelState) -> str:
    """The model's options as Ollama's ``parameters`` text (``key value`` lines)."""
    return "\n".join(f"{key:<30} {value}" for key, value in sorted(model.config.args.items()))


def show_view(model: ModelState) -> o.Shown:
    """``POST /api/show``."""
    facts = gguf_facts(model.path)
    template = facts.chat_template
    modelfile = f"# Modelfile generated by modelrouter\nFROM {model.path or model.name}\n"
    if template:
        modelfile += f'TEMPLATE """{template}"""\n'
    return o.Shown(
        modelfile=modelfile,
        parameters=_parameters(model),
        template=template,
        details=details(model, facts),
        model_info={k: v for k, v in facts.metadata.items() if k != "tokenizer.chat_template"},
        capabilities=capabilities(model, facts),
        modified_at=_modified(model),
    )
