"""``-hfd``/``--hf-repo-draft`` (preset key ``hf-repo-draft``, ``LLAMA_ARG_SPEC_DRAFT_HF_REPO``):
``draft-simple``'s model from the Hub (issue 33).

llama-server downloads the draft repo beside the target at start (``common_models_handler_init``),
and with ``-hfd`` reads ``-md`` as the file of that repo to take. Here the draft is an ordinary
cache model: its first load or request downloads it as a regular, recorded download job (under
the name ``user/repo:QUANT`` the Hub resolves it to, as ``POST /models`` would), the load waits for
it, and the worker gets its local file as ``-md``, recorded in ``instance_requested``. A draft that
names no quant takes the cached one the Hub would resolve it to first (``Q4_K_M``, then ``Q8_0``), else
any cached quant of the repo (the Hub is not asked again for a repo already here).

The draft's memory (:func:`draft_need`) is placed with its target: its weights, its KV cache (the
target's context, its own cache types) and its compute buffer, counted as RAM.

Pure module: the fold's state in, facts out.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from service.core.errors import CommandRejected
from service.core.holders import held_live
from service.core.launch import Params
from service.core.memory import estimate, launch_of
from service.core.model_spec import DEFAULT_QUANTS, InvalidModelName, ModelSpec, parse_model_spec
from service.core.state import ModelState, RouterState

DRAFT_REPO_KEY = "hf-repo-draft"  # the canonical key of -hfd in a model's recorded args
DRAFT_FILE_KEY = "model-draft"  # -md: with -hfd, the file of the draft repo (llama.cpp's hf_file)

__all__ = [
    "DraftSource",
    "draft_model",
    "draft_need",
    "draft_params",
    "draft_refusal",
    "draft_source",
    "file_model",
    "needs_draft",
]


@dataclass(frozen=True, slots=True)
class DraftSource:
    """Where a model's draft comes from: ``text`` as given (``user/repo[:quant][@rev]``), parsed."""

    text: str
    spec: ModelSpec
    hf_file: str | None = None


def draft_source(model: ModelState) -> DraftSource | None:
    """The model's ``hf-repo-draft``, or None (none given, or not a repo name: the load's download
    then refuses it with the resolver's reason)."""
    text = str(model.config.args.get(DRAFT_REPO_KEY) or "").strip()
    if not text:
        return None
    try:
        spec = parse_model_spec(text)
    except InvalidModelName:
        spec = ModelSpec(text)  # never in the cache: the download's resolution says why
    hf_file = str(model.config.args.get(DRAFT_FILE_KEY) or "").strip() or None
    return DraftSource(text, spec, hf_file)


def _is_draft(candidate: ModelState, source: DraftSource) -> bool:
    try:
        spec = parse_model_spec(candidate.name)
    except InvalidModelName:
        return False  # a local model (models dir, preset file): not a Hub repo
    if spec.repo.lower() != source.spec.repo.lower():
        return False
    if source.spec.quant is not None and spec.quant != source.spec.quant:
        return False
    return source.hf_file is None or any(f.path == source.hf_file for f in candidate.files)


def draft_model(state: RouterState, model: ModelState) -> ModelState | None:
    """The cache model that is ``model``'s draft, with its files on a node that is up and holds
    ``model``'s; None when ``model`` has no ``hf-repo-draft`` or its draft is not there yet (in a
    cluster, a draft held only where the model is not is downloaded again beside it)."""
    source = draft_source(model)
    if source is None:
        return None
    found = [
        m
        for m in state.models.values()
        if m.available and m.path and m.name != model.name and _is_draft(m, source) and _beside(state, m, model)
    ]
    return min(found, key=lambda m: (_preference(m, source), m.name)) if found else None


def _preference(candidate: ModelState, source: DraftSource) -> int:
    """The rank of a cached quant for a draft that names none: llama.cpp's default quants first."""
    if source.spec.quant is not None:
        return 0
    quant = parse_model_spec(candidate.name).quant
    return DEFAULT_QUANTS.index(quant) if quant in DEFAULT_QUANTS else len(DEFAULT_QUANTS)


def _beside(state: RouterState, draft: ModelState, model: ModelState) -> bool:
    """Whether ``draft`` is on a node that is up and holds ``model``'s files too: the worker that runs
    ``model`` reads its draft from its own disk (without nodes: whether the draft is here)."""
    if not draft.holders or not model.holders:
        return held_live(state, draft)
    shared = set(draft.holders) & set(model.holders)
    return any((node := state.nodes.get(name)) is None or not node.gone for name in shared)


def needs_draft(state: RouterState, model: ModelState) -> bool:
    """Whether ``model``'s ``hf-repo-draft`` is still to be downloaded before it loads."""
    return draft_source(model) is not None and draft_model(state, model) is None


def draft_params(state: RouterState, model: ModelState) -> Params:
    """``model``'s parameters with its Hub draft's local file as ``spec_draft_model`` (``-md``) when it is
    here: what ``instance_requested`` records, so the log says which file drafted."""
    draft = draft_model(state, model)
    params = dict(model.config.params)
    if draft is not None and draft.path is not None:
        params["spec_draft_model"] = draft.path
    return params


def draft_need(state: RouterState, model: ModelState, params: Params | None = None) -> int:
    """The bytes ``model``'s draft adds to its worker (``params``: the launch, by default the model's):
    the draft's weights, its KV cache over the target's context in its own cache types, and its
    compute buffer. 0 without ``draft-simple``, or while the draft is not here or not measured."""
    given = model.config.params if params is None else params
    if "draft-simple" not in str(given.get("spec_type", "")).split(","):
        return 0  # placement asks for every running model: most never draft with a model
    launch = launch_of(given)
    draft = draft_model(state, model) or file_model(state, launch.spec_draft_model)
    if draft is None or draft.shape is None:
        return 0
    shaped = dataclasses.replace(launch, cache_type_k=launch.spec_draft_type_k, cache_type_v=launch.spec_draft_type_v)
    need = estimate(draft.shape, shaped)
    return need.weights + need.kv_cache + need.compute  # in the target's worker: no process of its own


def file_model(state: RouterState, path: str | None) -> ModelState | None:
    """The listed model whose file ``path`` is (``-md``'s: a models-dir or cache model), if any."""
    if not path:
        return None
    return next((m for m in state.models.values() if m.path == path), None)


def draft_refusal(what: str, model: str, code: str, status: int, message: str) -> CommandRejected:
    """The Hub's refusal of ``what`` (a model's draft repo, its resolver ``code``, ``status`` and
    ``message``) as the load's answer. The model's settings are at fault, not the service, so a 4xx:
    404 for a repo or file the Hub does not have, 400 for any other refusal of the name. An
    unavailable Hub (5xx, 424) stays ``model_failed`` (503): a later try may succeed."""
    text = f"{what} cannot be downloaded: {message}"
    if status == 404:
        return CommandRejected("model_not_found", text, model=model, reason=code)
    if 400 <= status < 424:
        return CommandRejected("invalid_request", text, model=model, reason=code)
    return CommandRejected("model_failed", text, model=model, reason=code)
