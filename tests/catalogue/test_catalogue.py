"""Model sources on disk (HF cache, models dir) and the plan that brings the log in line."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from service.catalogue.cache_models import cache_models
from service.catalogue.desired import Desired, Listing, desired_models, pulled_config
from service.catalogue.disk import local_file, scan_cache, scan_models_dir
from service.catalogue.hf_source import is_preset_repo
from service.catalogue.plan import plan_catalogue
from service.core import events as ev
from service.core.errors import CommandRejected
from service.core.events import FileRef
from service.core.state import ModelConfig, RouterState
from service.llamacpp.presets import parse_preset
from tests.core.test_lifecycles import state_of

COMMIT = "c" * 40


def cached_repo(cache: Path, repo: str, files: dict[str, bytes], commit: str = COMMIT) -> Path:
    """A repo as huggingface_hub and llama.cpp write it: blobs by sha256, snapshot links, refs/main."""
    repo_dir = cache / ("models--" + repo.replace("/", "--"))
    for path, data in files.items():
        blob = repo_dir / "blobs" / hashlib.sha256(data).hexdigest()
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_bytes(data)
        link = repo_dir / "snapshots" / commit / path
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    (repo_dir / "refs").mkdir(exist_ok=True)
    (repo_dir / "refs" / "main").write_text(commit)
    return repo_dir


class TestCacheNames:
    def test_cached_ggufs_are_listed_as_repo_colon_tag(self, tmp_path: Path) -> None:
        cached_repo(
            tmp_path,
            "org/tagged-GGUF",
            {
                "model-Q8_0.gguf": b"q8",
                "model-f16.gguf": b"f16",
                "model.F32.gguf": b"f32",
                "untagged.gguf": b"x",
                "README.md": b"readme",
            },
        )
        repos, refused = scan_cache(tmp_path)
        assert sorted(cache_models(repos)) == ["org/tagged-GGUF:F16", "org/tagged-GGUF:F32", "org/tagged-GGUF:Q8_0"]
        assert refused == []

    def test_split_parts_are_one_model_with_its_projector_attached(self, tmp_path: Path) -> None:
        cached_repo(
            tmp_path,
            "org/split-GGUF",
            {
                "m-Q4_K_M-00001-of-00002.gguf": b"p1",
                "m-Q4_K_M-00002-of-00002.gguf": b"p2",
                "mmproj-F16.gguf": b"mm",
            },
        )
        (model,) = cache_models(scan_cache(tmp_path)[0]).values()
        assert model.name == "org/split-GGUF:Q4_K_M"
        assert [f.path for f in model.files] == [
            "m-Q4_K_M-00001-of-00002.gguf",
            "m-Q4_K_M-00002-of-00002.gguf",
            "mmproj-F16.gguf",
        ]
        first = model.files[0]
        assert first.sha256 == hashlib.sha256(b"p1").hexdigest() and Path(str(first.blob_path)).is_file()
        assert model.path == first.snapshot_path

    def test_an_incomplete_split_is_not_listed(self, tmp_path: Path) -> None:
        cached_repo(tmp_path, "org/half-GGUF", {"m-Q4_0-00001-of-00002.gguf": b"p1"})
        assert cache_models(scan_cache(tmp_path)[0]) == {}

    def test_a_snapshot_link_leading_out_of_the_cache_is_refused(self, tmp_path: Path) -> None:
        cache = tmp_path / "cache"
        repo_dir = cached_repo(cache, "org/evil-GGUF", {"m-Q8_0.gguf": b"ok"})
        secret = tmp_path / "secret-Q4_0.gguf"
        secret.write_bytes(b"not yours")
        (repo_dir / "snapshots" / COMMIT / "m-Q4_0.gguf").symlink_to(secret)
        repos, refused = scan_cache(cache)
        assert sorted(cache_models(repos)) == ["org/evil-GGUF:Q8_0"]
        assert [r.path.endswith("m-Q4_0.gguf") for r in refused] == [True] and "leads out" in refused[0].reason

    def test_a_repo_folder_linked_from_outside_the_cache_is_refused(self, tmp_path: Path) -> None:
        cache, elsewhere = tmp_path / "cache", tmp_path / "elsewhere"
        cached_repo(cache, "org/fine-GGUF", {"m-Q8_0.gguf": b"ok"})
        outside = cached_repo(elsewhere, "org/outside-GGUF", {"m-Q8_0.gguf": b"not yours"})
        (cache / outside.name).symlink_to(outside)
        repos, refused = scan_cache(cache)
        assert [r.repo for r in repos] == ["org/fine-GGUF"]
        assert [Path(r.path).name for r in refused] == [outside.name] and "leads out of the cache" in refused[0].reason

    def test_a_linked_cache_directory_is_fine(self, tmp_path: Path) -> None:
        cached_repo(tmp_path / "real", "org/fine-GGUF", {"m-Q8_0.gguf": b"ok"})
        (tmp_path / "link").symlink_to(tmp_path / "real")
        repos, refused = scan_cache(tmp_path / "link")
        assert [r.repo for r in repos] == ["org/fine-GGUF"] and refused == []


class TestModelsDir:
    def test_llama_cpps_layout(self, tmp_path: Path) -> None:
        (tmp_path / "llama-3.2-1b-Q4_K_M.gguf").write_bytes(b"a")
        (tmp_path / "mmproj-stray.gguf").write_bytes(b"m")
        vision = tmp_path / "gemma-3-4b-it-Q8_0"
        vision.mkdir()
        (vision / "gemma-3-4b-it-Q8_0.gguf").write_bytes(b"g")
        (vision / "mmproj-F16.gguf").write_bytes(b"p")
        found, refused = scan_models_dir(tmp_path)
        assert sorted(found) == ["gemma-3-4b-it-Q8_0", "llama-3.2-1b-Q4_K_M"] and refused == []
        assert [p.name for p in found["gemma-3-4b-it-Q8_0"]] == ["gemma-3-4b-it-Q8_0.gguf", "mmproj-F16.gguf"]

    def test_a_symlink_out_of_the_models_dir_is_refused_with_a_reason(self, tmp_path: Path) -> None:
        models, outside = tmp_path / "models", tmp_path / "elsewhere"
        models.mkdir()
        outside.mkdir()
        (outside / "private.gguf").write_bytes(b"x")
        (models / "inside.gguf").write_bytes(b"y")
        (models / "escape.gguf").symlink_to(outside / "private.gguf")
        (models / "escape-dir").symlink_to(outside)
        (models / "alias.gguf").symlink_to(models / "inside.gguf")  # stays inside: fine
        found, refused = scan_models_dir(models)
        assert sorted(found) == ["alias", "inside"]
        assert sorted(Path(r.path).name for r in refused) == ["escape-dir", "escape.gguf"]
        assert all("leads out of the models dir" in r.reason for r in refused)

    def test_a_split_model_with_a_part_leading_out_or_missing_is_refused(self, tmp_path: Path) -> None:
        models, outside = tmp_path / "models", tmp_path / "elsewhere"
        for folder in (models, outside, models / "sub-Q4_0", models / "whole"):
            folder.mkdir()
        (models / "top-00001-of-00002.gguf").write_bytes(b"1")
        (outside / "top-00002-of-00002.gguf").write_bytes(b"2")
        (models / "top-00002-of-00002.gguf").symlink_to(outside / "top-00002-of-00002.gguf")
        (models / "half-00001-of-00003.gguf").write_bytes(b"1")
        (models / "half-00002-of-00003.gguf").write_bytes(b"2")
        (models / "sub-Q4_0" / "m-00001-of-00002.gguf").write_bytes(b"1")
        (models / "sub-Q4_0" / "m-00002-of-00002.gguf").symlink_to(outside / "top-00002-of-00002.gguf")
        (models / "whole" / "w-00001-of-00002.gguf").write_bytes(b"1")
        (models / "whole" / "w-00002-of-00002.gguf").write_bytes(b"2")
        (models / "ok-00001-of-00002.gguf").write_bytes(b"1")
        (models / "ok-00002-of-00002.gguf").write_bytes(b"2")
        found, refused = scan_models_dir(models)
        assert sorted(found) == ["ok", "whole"], "no model is listed without all of its parts"
        assert [p.name for p in found["ok"]] == ["ok-00001-of-00002.gguf", "ok-00002-of-00002.gguf"]
        reasons = {Path(r.path).name: r.reason for r in refused}
        assert "leads out of the models dir" in reasons["top-00002-of-00002.gguf"]
        assert "2 usable of 3 parts" in reasons["half-00001-of-00003.gguf"]
        assert "2 usable of 2" not in str(reasons) and "sub-Q4_0" in reasons

    def test_a_preset_file_path_must_be_usable(self, tmp_path: Path) -> None:
        (tmp_path / "m.gguf").write_bytes(b"x")
        (tmp_path / "dangling.gguf").symlink_to(tmp_path / "gone.gguf")
        assert local_file(str(tmp_path / "m.gguf"))[0] == tmp_path / "m.gguf"
        assert local_file(str(tmp_path / "nope.gguf")) == (None, "no such file")
        assert "does not exist" in local_file(str(tmp_path / "dangling.gguf"))[1]
        assert "directory" in local_file(str(tmp_path))[1]


def test_a_preset_repo_is_decided_by_preset_ini_at_its_root() -> None:
    assert is_preset_repo(["preset.ini", "README.md"])
    assert not is_preset_repo(["m-Q4_K_M.gguf", "sub/preset.ini"])


def _desired(*names: str, source: str = "models_dir", config: ModelConfig | None = None) -> dict[str, Desired]:
    return {n: Desired(n, source, (FileRef(path=f"/m/{n}.gguf", size=1),), config or ModelConfig()) for n in names}


def _found(name: str) -> tuple[ev.Event, str]:
    return ev.ModelDiscovered(
        source="models_dir", path=f"/m/{name}.gguf", files=({"path": f"/m/{name}.gguf"},), size=0
    ), name


def _running(name: str) -> list[tuple[ev.Event, str]]:
    i = f"i-{name}"
    ready = ev.InstanceReady(
        instance_id=i, pid=1, endpoint="http://x", load_ms=1, n_ctx=64, n_params=1, file_size=1, architecture="llama"
    )
    return [
        (ev.InstanceRequested(instance_id=i, port=1), name),
        (ev.InstanceLoading(instance_id=i, pid=1, endpoint="http://x"), name),
        (ready, name),
    ]


class TestPlan:
    def test_a_restart_that_finds_nothing_new_appends_nothing(self) -> None:
        state = state_of(_found("a"))
        assert plan_catalogue(state, _desired("a"), ModelConfig(), frozenset({"/m/a.gguf"})).events == ()

    def test_new_changed_and_removed_models(self) -> None:
        state = state_of(_found("keep"), _found("change"), _found("gone"), *_running("change"), *_running("gone"))
        desired = {**_desired("keep", "new"), **_desired("change", config=ModelConfig(params={"n_ctx": 64}))}
        plan = plan_catalogue(state, desired, ModelConfig(), frozenset())
        assert (plan.added, plan.changed, plan.removed) == (("new",), ("change",), ("gone",))
        assert plan.unload == {"change": "reload", "gone": "removed"}
        kinds = [(e.event.TYPE, e.model) for e in plan.events]
        assert kinds == [("model_discovered", "new"), ("model_configured", "change"), ("model_removed", "gone")]

    def test_a_model_downloaded_by_post_models_stays_and_gets_the_common_settings(self) -> None:
        files = ({"path": "m-Q4_0.gguf", "snapshot_path": "/c/m-Q4_0.gguf"},)
        state = state_of(
            (ev.DownloadRequested(job_id="j", repo="u/r", commit="c" * 40, files=files, total_bytes=1), "u/r"),
            (ev.DownloadStarted(job_id="j", pid=1, commit="c" * 40, files=files, total_bytes=1), "u/r"),
            (
                ev.DownloadFinished(
                    job_id="j", commit="c" * 40, files=files, bytes_total=1, bytes_transferred=1, duration_ms=1
                ),
                "u/r",
            ),
        )
        base = ModelConfig(params={"n_ctx": 512})
        plan = plan_catalogue(state, {}, base, frozenset({"/c/m-Q4_0.gguf"}))
        assert plan.removed == () and [e.event.TYPE for e in plan.events] == ["model_configured"]
        gone = plan_catalogue(state, {}, ModelConfig(), frozenset())
        assert gone.removed == ("u/r",), "its file vanished: it goes"

    def test_an_hf_repo_preset_is_listed_before_it_is_downloaded(self) -> None:
        listing = Listing(presets=(parse_preset("[remote]\nhf-repo = u/r:Q4_K_M\n", "p.ini"),))
        desired, warnings = desired_models(listing)
        assert desired["remote"].files == () and desired["remote"].config.hf_repo == "u/r:Q4_K_M"
        plan = plan_catalogue(RouterState(), desired, ModelConfig(), frozenset())
        state = state_of(*[(e.event, e.model) for e in plan.events])
        assert state.models["remote"].listed and state.models["remote"].status.value == "unloaded"
        assert warnings == []

    def test_a_pulled_model_gets_its_preset_section_at_once(self) -> None:
        """A ``POST /models`` pull is configured when requested, as llama.cpp re-reads its sources."""
        preset = parse_preset("[*]\nc = 64\n[u/r:q4_k_m]\nt = 3\n", "p.ini")
        listing = Listing(presets=(preset,), cli_layer={"batch-size": "32"})
        assert pulled_config(listing, "u/r:Q4_K_M").params == {"n_ctx": 64, "n_threads": 3, "n_batch": 32}
        assert pulled_config(listing, "u/other:F16").params == {"n_ctx": 64, "n_batch": 32}
        assert pulled_config(Listing(), "u/r:Q4_K_M") == ModelConfig()

    def test_a_section_without_a_source_is_skipped_with_a_warning(self) -> None:
        desired, warnings = desired_models(Listing(presets=(parse_preset("[lonely]\nc = 1\n", "p.ini"),)))
        assert desired == {} and "no model source" in warnings[0]


class TestNames:
    def test_user_repo_names_its_only_tag(self) -> None:
        state = state_of(_found("u/r:Q4_K_M"), _found("u/other:F16"))
        found = state.resolve("u/r")
        assert found is not None and found.name == "u/r:Q4_K_M"
        assert state.resolve("u/none") is None

    def test_several_tags_make_the_short_name_ambiguous(self) -> None:
        state = state_of(_found("u/r:Q4_K_M"), _found("u/r:Q8_0"))
        with pytest.raises(CommandRejected) as refused:
            state.resolve("u/r")
        assert refused.value.code == "conflict" and refused.value.extra["candidates"] == ["u/r:Q4_K_M", "u/r:Q8_0"]

    def test_aliases_resolve(self) -> None:
        state = state_of(_found("m"), (ev.ModelConfigured(aliases=("fast",)), "m"))
        found = state.resolve("fast")
        assert found is not None and found.name == "m"


@pytest.mark.parametrize(
    ("text", "hidden"),
    [
        ("[*]\ndedup-cache-models = true\n[mine]\nhf-repo = u/r-GGUF:q8_0\n", {"u/r-GGUF:Q8_0"}),
        ("[mine]\nhf-repo = u/r-GGUF:Q8_0\ndedup-cache-models = 1\n", {"u/r-GGUF:Q8_0"}),
        ("[*]\ndedup-cache-models = true\n[mine]\nhf-repo = u/r-GGUF:Q8_0\ndedup-cache-models = 0\n", set()),
        ("[mine]\nhf-repo = u/r-GGUF:Q8_0\n", set()),
        ("[mine]\nhf-repo = u/r-GGUF:Q8_0\ndedup-cache-models = yes\n", set()),  # not llama.cpp's truthy
        ("[*]\ndedup-cache-models = true\n[mine]\nhf-repo = u/r-GGUF:F16\n", {"u/r-GGUF:F16"}),
        (
            "[mine]\nhf = u/r-GGUF:F16\nspec-draft-hf = u/d-GGUF:Q4_0\ndedup-cache-models = on\n",
            {"u/r-GGUF:F16", "u/d-GGUF:Q4_0"},
        ),
    ],
)
def test_dedup_cache_models_hides_the_cache_entries_behind_a_preset(
    tmp_path: Path, text: str, hidden: set[str]
) -> None:
    """README: hide the cached model an ``hf-repo`` preset points to, in a section or from
    ``[*]``; server-models.cpp also hides its draft's (``spec-draft-hf``)."""
    cached_repo(tmp_path, "u/r-GGUF", {"m-Q8_0.gguf": b"q8", "m-F16.gguf": b"f16"})
    cached_repo(tmp_path, "u/d-GGUF", {"d-Q4_0.gguf": b"d"})
    repos, _ = scan_cache(tmp_path)
    listing = Listing(cache=cache_models(repos), repos=tuple(repos), presets=(parse_preset(text, "p.ini"),))
    desired, _ = desired_models(listing)
    assert {name for name, d in desired.items() if d.config.hidden} == hidden
