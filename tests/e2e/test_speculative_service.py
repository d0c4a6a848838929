"""``--spec-type`` through the service (issue 33): the command line, a preset and ``LLAMA_ARG_SPEC_TYPE``
reach the model's worker as llama-server's options do, and its replies report the drafts."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from devtools.service_process import ServiceProcess
from devtools.tiny_gguf import write_tiny_gguf

pytestmark = pytest.mark.timeout(240)
PROMPTS = ("abcabcabc abcabcabc abc", "hello hello hello", "one two one two one", "zzz yy zzz yy")


@pytest.fixture
def models(tmp_path: Path) -> Iterator[Path]:
    folder = tmp_path / "models"
    folder.mkdir()
    write_tiny_gguf(folder / "tiny.gguf", seed=7)
    yield folder


def _complete(svc: ServiceProcess, model: str) -> list[dict[str, Any]]:
    """The tiny random model soon loops at temperature 0: what a drafter guesses right."""
    found = []
    for prompt in PROMPTS:
        body = {"model": model, "prompt": prompt, "n_predict": 128, "temperature": 0}
        answer = httpx.post(f"{svc.url}/completion", json=body, timeout=120)
        assert answer.status_code == 200, answer.text
        found.append(answer.json())
    return found


def test_a_preset_turns_speculation_on_with_the_command_line_s_sizes(models: Path, tmp_path: Path) -> None:
    """As llama-server's router: the command line is overlaid on every model, a preset's keys on its own."""
    presets = tmp_path / "presets.ini"
    presets.write_text(
        f"[plain]\nmodel = {models / 'tiny.gguf'}\n\n[eager]\nmodel = {models / 'tiny.gguf'}\nspec-type = ngram-simple\n"
    )
    sizes = ["--spec-ngram-simple-size-n", "3", "--spec-ngram-simple-size-m", "8"]
    svc = ServiceProcess(tmp_path / "home", args=["--models-dir", str(models), "--presets", str(presets), *sizes])
    svc.start()
    try:
        eager, plain = _complete(svc, "eager"), _complete(svc, "plain")
        assert sum(a["timings"].get("draft_n_accepted", 0) for a in eager) > 0
        assert all("draft_n" not in a["timings"] for a in plain)
        assert [a["content"] for a in eager] == [a["content"] for a in plain]
        props = httpx.get(f"{svc.url}/props", params={"model": "eager"}, timeout=30).json()
        assert props["default_generation_settings"]["params"]["speculative.types"] == "ngram-simple"
    finally:
        svc.stop()


def test_an_unknown_type_is_refused_at_start_with_llama_cpp_s_words(models: Path, tmp_path: Path) -> None:
    svc = ServiceProcess(tmp_path / "home", args=["--models-dir", str(models), "--spec-type", "ngram-fancy"])
    with pytest.raises(RuntimeError, match="service exited"):
        svc.start()
    assert "unknown speculative type: ngram-fancy" in svc.log_text()


def test_adaptive_drafting_is_a_preset_key_and_a_serve_switch(models: Path, tmp_path: Path) -> None:
    """modelrouter's own: ``spec-adaptive`` in a preset, ``--no-spec-adaptive`` on the command line over it."""
    from service.core.launch import InferenceLaunch
    from service.llamacpp.options import model_settings
    from service.llamacpp.presets import parse_preset
    from service.settings import Settings
    from service.supervision.worker_args import inference_argv

    text = f"[m]\nmodel = {models / 'tiny.gguf'}\nspec-type = ngram-simple\nspec-adaptive = off\n"
    section = parse_preset(text, "p.ini").sections[0]
    params = model_settings(section.options, section.extras).config.params
    assert InferenceLaunch.from_params(params).spec_adaptive is False
    home = {"MODELROUTER_HOME": str(tmp_path)}
    off = inference_argv(Settings.from_env(home), "m", str(models / "tiny.gguf"), "m-1", 0, params)
    assert "--no-spec-adaptive" in off  # the preset's
    on = inference_argv(Settings.from_env(home, spec_adaptive=True), "m", str(models / "tiny.gguf"), "m-1", 0, params)
    assert "--no-spec-adaptive" not in on  # the command line's, over it (on: the worker's default)
    with pytest.raises(Exception, match="spec-adaptive: expected on or off"):
        bad = parse_preset(text.replace("= off", "= sometimes"), "p.ini").sections[0]
        model_settings(bad.options, bad.extras)


def test_llama_arg_variables_and_preset_keys_name_the_spec_options() -> None:
    """``LLAMA_ARG_SPEC_*`` and the preset keys reach the launch as every llama-server option does."""
    from service.core.launch import InferenceLaunch
    from service.llamacpp.command_line import env_options
    from service.llamacpp.options import model_settings

    env = {"LLAMA_ARG_SPEC_TYPE": "ngram-mod,ngram-simple", "LLAMA_ARG_SPEC_DRAFT_N_MAX": "5"}
    options = {**env_options(env), "spec-ngram-mod-n-match": "16", "model-draft": "/m/draft.gguf"}
    launch = InferenceLaunch.from_params(model_settings(options, {}).config.params)
    assert launch.spec_type == "ngram-simple,ngram-mod"  # llama.cpp's order
    assert (launch.spec_draft_n_max, launch.spec_ngram_mod_n_match) == (5, 16)
    assert launch.spec_draft_model == "/m/draft.gguf"


def test_a_local_draft_models_memory_is_placed_with_its_target(models: Path, tmp_path: Path) -> None:
    """``-md`` naming a listed model's file: measured at the target's first load, and its bytes are in the
    target's memory (``GET /models`` ``memory.draft_bytes``): one process, one more model in it."""
    tiny, draft = models / "tiny.gguf", models / "draft.gguf"
    draft.write_bytes(tiny.read_bytes())  # its own file, never loaded by itself: measured for its target
    presets = tmp_path / "presets.ini"
    presets.write_text(f"[spec]\nmodel = {tiny}\nspec-type = draft-simple\nmodel-draft = {draft}\n")
    svc = ServiceProcess(tmp_path / "home", args=["--models-dir", str(models), "--presets", str(presets)])
    svc.start()
    try:
        before = {m["id"]: m for m in httpx.get(f"{svc.url}/models", timeout=30).json()["data"]}
        assert "memory" not in before["draft"], "not measured before its target's first load"
        assert sum(a["timings"].get("draft_n_accepted", 0) for a in _complete(svc, "spec")) > 0
        listed = {m["id"]: m for m in httpx.get(f"{svc.url}/models", timeout=30).json()["data"]}
        memory, alone = listed["spec"]["memory"], listed["draft"]["memory"]
        assert memory["draft_bytes"] == alone["weights_bytes"] + alone["kv_cache_bytes"] + alone["compute_bytes"]
        assert memory["total_bytes"] == alone["total_bytes"] + memory["draft_bytes"], "the same shape, twice"
    finally:
        svc.stop()


def test_spec_default_adds_ngram_mod_with_its_sizes_and_removed_options_refuse_the_model() -> None:
    """llama-server's ``--spec-default``: ngram-mod (match 24, draft 48 to 64) beside any type given; a
    preset naming an option llama.cpp removed refuses its model with llama.cpp's words."""
    from service.core.launch import InferenceLaunch
    from service.llamacpp.options import OptionError, model_settings

    def launch(options: dict[str, str]) -> InferenceLaunch:
        return InferenceLaunch.from_params(model_settings(options, {}).config.params)

    alone = launch({"spec-default": "1"})
    assert alone.spec_type == "ngram-mod"
    assert (alone.spec_ngram_mod_n_match, alone.spec_ngram_mod_n_min, alone.spec_ngram_mod_n_max) == (24, 48, 64)
    assert launch({"spec-default": "1", "spec-type": "ngram-simple"}).spec_type == "ngram-simple,ngram-mod"
    assert launch({"spec-default": "1", "spec-type": "none"}).spec_type == "ngram-mod"
    assert launch({"spec-default": "1", "spec-ngram-mod-n-max": "32"}).spec_ngram_mod_n_max == 32
    assert launch({"spec-default": "0"}).spec_type == "none"  # LLAMA_ARG-style off: as never given
    with pytest.raises(OptionError, match=r"spec-ngram-min-hits: the argument has been removed\. use the respective"):
        model_settings({"spec-type": "ngram-simple", "spec-ngram-min-hits": "2"}, {})


def test_a_draft_from_the_hub_is_downloaded_on_first_use_and_drafts(models: Path, tmp_path: Path, hub: Any) -> None:
    """``hf-repo-draft`` (llama-server's ``-hfd``): the first request downloads the draft as a recorded
    job of its own cache model, the worker drafts with its file; a draft repo the Hub lacks is a 404."""
    from devtools.hub_repos import make_repo
    from tests.conftest_hub import unique_repo
    from tests.service_probes import events, wait_for_event

    repo, missing = unique_repo("draft"), unique_repo("nodraft")
    make_repo(hub.root, repo, {"draft-Q8_0.gguf": (models / "tiny.gguf").read_bytes(), "README.md": b"# draft\n"})
    tiny = models / "tiny.gguf"
    presets = tmp_path / "presets.ini"
    presets.write_text(
        f"[spec]\nmodel = {tiny}\nspec-type = draft-simple\nhf-repo-draft = {repo}\n\n"
        f"[plain]\nmodel = {tiny}\n\n[lost]\nmodel = {tiny}\nspec-type = draft-simple\nhf-repo-draft = {missing}\n"
    )
    svc = ServiceProcess(tmp_path / "home", args=["--presets", str(presets)], env={"HF_ENDPOINT": hub.url})
    svc.start()
    try:
        drafted, plain = _complete(svc, "spec"), _complete(svc, "plain")
        assert sum(a["timings"].get("draft_n_accepted", 0) for a in drafted) > 0
        assert [a["content"] for a in drafted] == [a["content"] for a in plain]
        draft = f"{repo}:Q8_0"
        types = [e["type"] for e in events(svc, model=draft, type=["download_requested", "download_finished"])]
        assert types == ["download_requested", "download_finished"], "one recorded job, under the draft's name"
        order = [(e["type"], e["model"]) for e in events(svc, type=["download_finished", "instance_requested"])]
        assert order.index(("download_finished", draft)) < order.index(("instance_requested", "spec"))
        (requested,) = events(svc, type="instance_requested", model="spec")
        draft_file = Path(requested["data"]["params"]["spec_draft_model"])
        listed = next(m for m in httpx.get(f"{svc.url}/models", timeout=30).json()["data"] if m["id"] == "spec")
        memory = listed["memory"]
        assert memory["draft_bytes"] > draft_file.stat().st_size, "the draft's weights, KV cache and compute"
        parts = ("weights_bytes", "kv_cache_bytes", "compute_bytes", "overhead_bytes", "draft_bytes")
        assert memory["total_bytes"] == sum(memory[k] for k in parts), "placed with the model"
        assert draft_file.name == "draft-Q8_0.gguf", "the log names the draft's file"
        # The draft's file deleted by hand: the next load records it gone and downloads it again.
        unloaded = httpx.post(f"{svc.url}/models/unload", json={"model": "spec"}, timeout=60)
        assert unloaded.status_code == 200, unloaded.text
        wait_for_event(svc, "instance_stopped", model="spec", timeout=60)
        draft_file.unlink()
        again = _complete(svc, "spec")
        assert [a["content"] for a in again] == [a["content"] for a in plain]
        assert sum(a["timings"].get("draft_n_accepted", 0) for a in again) > 0, "it drafts again"
        types = [e["type"] for e in events(svc, model=draft, type=["model_removed", "download_finished"])]
        assert types == ["download_finished", "model_removed", "download_finished"]
        assert draft_file.is_file()
        refused = httpx.post(f"{svc.url}/completion", json={"model": "lost", "prompt": "a"}, timeout=60)
        assert refused.status_code == 404, refused.text
        assert f"hf-repo-draft = {missing}" in refused.text and "not found" in refused.text.lower()
        assert events(svc, type="instance_requested", model="lost") == [], "no worker for a draft that is not there"
    finally:
        svc.stop()


def test_single_model_mode_takes_the_draft_repo_from_llama_arg_spec_draft_hf_repo(
    models: Path, tmp_path: Path, hub: Any
) -> None:
    """``llama-server -m FILE --spec-type draft-simple`` with ``LLAMA_ARG_SPEC_DRAFT_HF_REPO``: the load at
    start downloads the draft first (without it, draft-simple's load would fail), then the model drafts."""
    from devtools.hub_repos import make_repo
    from tests.conftest_hub import unique_repo

    repo = unique_repo("draft")
    make_repo(hub.root, repo, {"draft-Q8_0.gguf": (models / "tiny.gguf").read_bytes()})
    env = {"HF_ENDPOINT": hub.url, "LLAMA_ARG_SPEC_DRAFT_HF_REPO": repo}
    args = ["-m", str(models / "tiny.gguf"), "--spec-type", "draft-simple"]
    svc = ServiceProcess(tmp_path / "home", args=args, env=env)
    svc.start()
    try:
        body = {"prompt": PROMPTS[0], "n_predict": 64, "temperature": 0}
        answer = httpx.post(f"{svc.url}/completion", json=body, timeout=120)
        assert answer.status_code == 200, answer.text
        assert answer.json()["timings"]["draft_n_accepted"] > 0
        assert '"download_finished' in svc.log_text() and repo in svc.log_text()
    finally:
        svc.stop()
