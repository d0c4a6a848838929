"""``hf-repo-draft`` (:mod:`service.core.draft_source`): which cache model is a model's draft, when
its load must download it first, the launch its worker gets, and how a Hub refusal is answered."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import service.core.instance_lifecycle as lifecycle
import service.core.placement as placement
from service.core.draft_source import (
    draft_model,
    draft_need,
    draft_params,
    draft_refusal,
    draft_source,
    needs_draft,
)
from service.core.event_base import FileRef
from service.core.launch import InferenceLaunch
from service.core.node_state import Holding, NodeState
from service.core.placement import NodeBudget, NodeLoad, Verdict
from service.core.scheduling import needs_files
from service.core.state import ModelConfig, ModelState, RouterState
from tests.core.shapes import llama_8b

TARGET_PATH = "/models/target.gguf"


def target(**args: str) -> ModelState:
    """A local model with its files, whose preset gives ``args``."""
    files = (FileRef(path="target.gguf", size=1, snapshot_path=TARGET_PATH),)
    return ModelState(
        name="target", source="models_dir", available=True, files=files, path=TARGET_PATH, config=ModelConfig(args=args)
    )


def cached(name: str, *files: str) -> ModelState:
    refs = tuple(FileRef(path=f, size=1, snapshot_path=f"/cache/{f}") for f in files or ("d-Q8_0.gguf",))
    return ModelState(name=name, available=True, files=refs, path=refs[0].local_path)


def launched(model: ModelState, **params: Any) -> ModelState:  # Any: the launch's values
    """``model`` with the worker parameters ``params`` (its launch before the draft's file is added)."""
    return replace(model, config=replace(model.config, params=params))


def state(*models: ModelState) -> RouterState:
    return RouterState(models={m.name: m for m in models})


def test_without_a_draft_repo_nothing_changes() -> None:
    model = launched(target(), n_ctx=64)
    assert draft_source(model) is None and not needs_draft(state(model), model)
    assert draft_params(state(model), model) == {"n_ctx": 64}


def test_a_draft_repo_not_in_the_cache_is_needed_and_so_are_the_models_files() -> None:
    model = launched(target(**{"hf-repo-draft": "Tester/Draft-GGUF:q8_0"}), n_ctx=64)
    source = draft_source(model)
    assert source is not None and (source.spec.repo, source.spec.quant) == ("Tester/Draft-GGUF", "Q8_0")
    here = state(model, cached("tester/other-GGUF:Q8_0"), cached("tester/draft-GGUF:Q4_K_M"))
    assert needs_draft(here, model), "another repo, another quant: not the draft"
    assert needs_files(model, here), "the load downloads first, though the model's own files are here"
    assert draft_params(here, model) == {"n_ctx": 64}


def test_the_cached_draft_is_found_by_repo_and_quant_and_its_file_becomes_md() -> None:
    model = target(**{"hf-repo-draft": "tester/draft-GGUF:Q8_0", "spec-type": "draft-simple"})
    model = launched(model, n_ctx=64, spec_type="draft-simple", spec_draft_model="d-Q8_0.gguf")
    draft = cached("tester/draft-GGUF:Q8_0")
    here = state(model, cached("tester/draft-GGUF:Q4_K_M"), draft)
    assert draft_model(here, model) == draft and not needs_draft(here, model) and not needs_files(model, here)
    launch = InferenceLaunch.from_params(draft_params(here, model))
    assert (launch.spec_draft_model, launch.n_ctx, launch.spec_type) == ("/cache/d-Q8_0.gguf", 64, "draft-simple")
    argv = launch.to_argv()
    assert argv[argv.index("/cache/d-Q8_0.gguf") - 1] in ("--spec-draft-model", "-md", "--model-draft")


def test_without_a_quant_a_cached_quant_serves_and_md_picks_the_file() -> None:
    model = target(**{"hf-repo-draft": "tester/draft-GGUF", "model-draft": "sub/d-Q4_0.gguf"})
    other, wanted = cached("tester/draft-GGUF:Q8_0"), cached("tester/draft-GGUF:Q4_0", "sub/d-Q4_0.gguf")
    assert draft_model(state(model, other, wanted), model) == wanted, "-md names the repo's file"
    assert needs_draft(state(model, other), model)
    plain = target(**{"hf-repo-draft": "tester/draft-GGUF"})
    assert draft_model(state(plain, other), plain) == other


def test_a_draft_that_is_not_a_repo_name_is_never_in_the_cache() -> None:
    model = target(**{"hf-repo-draft": "not a repo"})
    assert needs_draft(state(model, cached("not a repo")), model)


def test_a_refusal_of_the_draft_repo_is_the_clients_error_unless_the_hub_is_down() -> None:
    missing = draft_refusal("the draft", "target", "repo_not_found", 404, "no such repo")
    assert (missing.code, missing.extra["reason"]) == ("model_not_found", "repo_not_found")
    assert "the draft cannot be downloaded: no such repo" in missing.message
    assert draft_refusal("d", "target", "unauthorized", 401, "gated").code == "invalid_request"
    assert draft_refusal("d", "target", "network", 424, "the Hub answered 500").code == "model_failed"


def test_a_draft_that_names_no_quant_takes_llama_cpps_default_quant_first() -> None:
    """Without a quant, the Hub resolves Q4_K_M, then Q8_0: the cached one of those serves before any other."""
    model = target(**{"hf-repo-draft": "tester/draft-GGUF"})
    q2, q8, q4 = (cached(f"tester/draft-GGUF:{q}") for q in ("Q2_K", "Q8_0", "Q4_K_M"))
    assert draft_model(state(model, q2, q8, q4), model) == q4
    assert draft_model(state(model, q2, q8), model) == q8
    assert draft_model(state(model, q2), model) == q2, "none of the defaults here: the cached one serves"
    named = target(**{"hf-repo-draft": "tester/draft-GGUF:Q2_K"})
    assert draft_model(state(named, q2, q8, q4), named) == q2


def test_instance_requested_records_the_drafts_file() -> None:
    model = target(**{"hf-repo-draft": "tester/draft-GGUF:Q8_0"})
    model = replace(model, config=replace(model.config, params={"n_ctx": 64, "spec_type": "draft-simple"}))
    here = state(model, cached("tester/draft-GGUF:Q8_0"))
    params = draft_params(here, model)
    assert params == {"n_ctx": 64, "spec_type": "draft-simple", "spec_draft_model": "/cache/d-Q8_0.gguf"}
    request = lifecycle.request("target-1", 9000, model, "load", None, params)
    assert request.launch.spec_draft_model == "/cache/d-Q8_0.gguf"
    assert draft_params(state(model), model) == model.config.params, "not here yet: the model's own"


def test_the_drafts_memory_is_placed_with_its_target() -> None:
    """The draft runs in its target's worker: its weights, KV cache and compute count there, in RAM."""
    shaped = replace(target(**{"hf-repo-draft": "tester/draft-GGUF:Q8_0"}), shape=llama_8b())
    model = replace(shaped, config=replace(shaped.config, params={"n_ctx": 4096, "spec_type": "draft-simple"}))
    draft = replace(cached("tester/draft-GGUF:Q8_0"), shape=llama_8b(weights_bytes=400_000_000, n_layer=4))
    here = state(model, draft)
    extra = draft_need(here, model)
    assert extra > 400_000_000, "weights, plus its KV cache and compute buffer"
    q8 = draft_need(here, model, {**model.config.params, "spec_draft_type_k": "q8_0", "spec_draft_type_v": "q8_0"})
    assert extra > q8 > 400_000_000, "the draft's own cache types size its KV cache"
    assert draft_need(here, replace(model, config=replace(model.config, params={"n_ctx": 4096}))) == 0
    assert draft_need(state(model, replace(draft, shape=None)), model) == 0, "not measured: placed by count"
    alone = placement.model_need(model)

    def verdict(memory: int) -> Verdict:
        budget = NodeBudget(None, 4, memory)
        return placement.judge(model, budget, NodeLoad(), {}, frozenset(), draft=extra).verdict

    assert verdict(alone + extra) is Verdict.FITS
    assert verdict(alone + extra - 1) is Verdict.IMPOSSIBLE, "the target alone would fit: the draft does not"


def test_in_a_cluster_the_draft_must_be_on_a_node_that_holds_its_target() -> None:
    """The worker reads its draft from its own disk: a draft held only where the target is not is
    downloaded again beside it, and the target runs only where both are."""

    def on(model: ModelState, *nodes: str) -> ModelState:
        return replace(model, holders={n: Holding(path=f"/{n}{model.path}") for n in nodes})

    model = on(target(**{"hf-repo-draft": "tester/draft-GGUF:Q8_0"}), "a", "b")
    nodes = {n: NodeState(name=n, incarnation=f"{n}-1", url=f"http://{n}") for n in ("a", "b", "c")}
    elsewhere = replace(state(model, on(cached("tester/draft-GGUF:Q8_0"), "c")), nodes=nodes)
    assert draft_model(elsewhere, model) is None and needs_draft(elsewhere, model)
    draft = on(cached("tester/draft-GGUF:Q8_0"), "b", "c")
    beside = replace(state(model, draft), nodes=nodes)
    assert draft_model(beside, model) == draft
    budgets = [NodeBudget(n, 4) for n in ("a", "b", "c")]
    assert [b.name for b in placement.candidates(model, budgets, draft)] == ["b"]
    assert [b.name for b in placement.candidates(model, budgets)] == ["a", "b"]
