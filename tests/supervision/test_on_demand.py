"""Files that come on first use (:mod:`service.supervision.on_demand`): a preset model's ``hf-repo``
resolved on the Hub and fetched as a regular download job, the load that waits for it, and the refusals;
a model's ``hf-repo-draft``, fetched the same way as a cache model of its own.
A real log, real download workers against the test Hub (the harness of ``test_downloads.py``)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from devtools.hub_repos import make_repo
from devtools.hub_server import HubServer
from service.core import events as ev
from service.core.draft_source import draft_model
from service.core.errors import CommandRejected
from service.core.event_base import FileRef
from service.core.scheduling import needs_files
from service.core.state import JobStatus
from service.event_store.codec import NewEvent
from service.supervision.on_demand import FetchFiles, OnDemandFiles
from tests.conftest_hub import unique_repo
from tests.supervision.test_downloads import MB, Downloads, downloads

pytestmark = pytest.mark.timeout(90)
MODEL = "preset-model"


class Loads:
    """The ``load`` a fetch calls once the files are there: each call, with its reason."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.called = asyncio.Event()

    async def __call__(self, name: str, *, reason: str) -> Any:
        self.calls.append((name, reason))
        self.called.set()


async def _preset(d: Downloads, hf_repo: str) -> None:
    """``[preset-model] hf-repo = ...`` as the catalogue records it: configured, no files yet."""
    await d.live.record([NewEvent(ev.ModelConfigured(hf_repo=hf_repo), model=MODEL)])


async def test_a_preset_models_repo_is_downloaded_then_the_model_loaded(tmp_path: Path, hub: HubServer) -> None:
    repo = unique_repo("od")
    make_repo(hub.root, repo, {"m-Q4_K_M.gguf": MB})
    async with downloads(tmp_path, hub) as d:
        await _preset(d, repo)
        files, loads = OnDemandFiles(d.settings, d.live, d.sup), Loads()
        job_id = await files.fetch(FetchFiles(MODEL, then_load="autoload"), loads)
        assert job_id is not None and d.job(job_id).repo == repo
        assert await files.fetch(FetchFiles(MODEL), loads) == job_id  # a second ask joins the job
        model = await files.ready(MODEL)
        assert model.available and d.job(job_id).status is JobStatus.FINISHED
        await asyncio.wait_for(loads.called.wait(), 30)
        assert loads.calls == [(MODEL, "autoload")]
        await files.close()


async def test_offline_a_model_without_its_files_is_refused_at_once(tmp_path: Path, hub: HubServer) -> None:
    async with downloads(tmp_path, hub, offline=True) as d:
        await _preset(d, unique_repo("od"))
        with pytest.raises(CommandRejected) as refused:
            await OnDemandFiles(d.settings, d.live, d.sup).fetch(FetchFiles(MODEL), Loads())
        assert refused.value.code == "model_failed" and "offline" in refused.value.message
        assert d.live.state.all_jobs() == []


async def test_a_repo_the_hub_does_not_have_is_refused_with_the_hubs_reason(tmp_path: Path, hub: HubServer) -> None:
    async with downloads(tmp_path, hub) as d:
        await _preset(d, unique_repo("missing"))
        with pytest.raises(CommandRejected) as refused:
            await OnDemandFiles(d.settings, d.live, d.sup).fetch(FetchFiles(MODEL), Loads())
        assert refused.value.code == "model_failed" and refused.value.extra["reason"] == "repo_not_found"
        assert d.live.state.all_jobs() == []


async def test_a_download_that_fails_fails_the_wait_and_the_load_with_its_reason(
    tmp_path: Path, hub: HubServer
) -> None:
    repo = unique_repo("od")
    make_repo(hub.root, repo, {"m-Q4_K_M.gguf": MB})
    async with downloads(tmp_path, hub) as d:
        await _preset(d, repo)
        files, loads = OnDemandFiles(d.settings, d.live, d.sup), Loads()
        hub.set_faults({"kind": "status", "repo": repo, "status": 404, "error_code": "EntryNotFound", "times": None})
        job_id = await files.fetch(FetchFiles(MODEL, then_load="autoload"), loads)
        with pytest.raises(CommandRejected) as failed:
            await files.ready(MODEL)
        assert failed.value.code == "model_failed" and "could not be downloaded" in failed.value.message
        assert job_id is not None and d.job(job_id).status is JobStatus.FAILED
        await files.close()
        assert loads.calls == []  # its files never came: nothing is loaded


async def _with_draft(d: Downloads, home: Path, draft: str) -> None:
    """A local model (its files here) whose preset says ``hf-repo-draft = draft``."""
    path = home / "target.gguf"
    path.write_bytes(b"GGUF")
    files = (FileRef(path=str(path), size=4),)
    discovered = ev.ModelDiscovered(path=str(path), files=files, size=4)
    configured = ev.ModelConfigured(args={"hf-repo-draft": draft, "spec-type": "draft-simple"})
    await d.live.record([NewEvent(discovered, model=MODEL), NewEvent(configured, model=MODEL)])


async def test_a_models_draft_repo_is_downloaded_as_its_own_cache_model(tmp_path: Path, hub: HubServer) -> None:
    """``hf-repo-draft``: the model's files are here, its draft's are not; the fetch downloads only the
    draft, under the name the Hub resolves it to, and the wait ends once the draft is here."""
    repo = unique_repo("draft")
    make_repo(hub.root, repo, {"d-Q8_0.gguf": MB, "d-Q4_K_M.gguf": MB})
    async with downloads(tmp_path, hub) as d:
        await _with_draft(d, tmp_path, f"{repo}:q8_0")
        assert needs_files(d.live.state.models[MODEL], d.live.state)
        files, loads = OnDemandFiles(d.settings, d.live, d.sup), Loads()
        job_id = await files.fetch(FetchFiles(MODEL, then_load="autoload"), loads)
        assert job_id is not None and d.job(job_id).model == f"{repo}:Q8_0" and d.job(job_id).quant == "Q8_0"
        assert await files.fetch(FetchFiles(MODEL), loads) == job_id  # a second ask joins the job
        assert (await files.ready(MODEL)).name == MODEL
        await asyncio.wait_for(loads.called.wait(), 30)
        state = d.live.state
        draft = draft_model(state, state.models[MODEL])
        assert draft is not None and draft.name == f"{repo}:Q8_0" and d.job(job_id).status is JobStatus.FINISHED
        assert (
            draft.path is not None and Path(draft.path).name == "d-Q8_0.gguf" and Path(draft.path).stat().st_size == MB
        )
        assert not needs_files(state.models[MODEL], state) and loads.calls == [(MODEL, "autoload")]
        await files.close()


async def test_a_draft_repo_the_hub_does_not_have_is_a_404_naming_the_model_and_its_draft(
    tmp_path: Path, hub: HubServer
) -> None:
    missing = unique_repo("nodraft")
    async with downloads(tmp_path, hub) as d:
        await _with_draft(d, tmp_path, missing)
        with pytest.raises(CommandRejected) as refused:
            await OnDemandFiles(d.settings, d.live, d.sup).fetch(FetchFiles(MODEL), Loads())
        assert refused.value.code == "model_not_found" and refused.value.extra["reason"] == "repo_not_found"
        assert f"the draft model of {MODEL!r} (hf-repo-draft = {missing})" in refused.value.message
        assert d.live.state.all_jobs() == []


async def test_a_failed_draft_download_fails_the_wait_with_its_reason(tmp_path: Path, hub: HubServer) -> None:
    repo = unique_repo("draft")
    make_repo(hub.root, repo, {"d-Q8_0.gguf": MB})
    async with downloads(tmp_path, hub) as d:
        await _with_draft(d, tmp_path, repo)
        files, loads = OnDemandFiles(d.settings, d.live, d.sup), Loads()
        hub.set_faults({"kind": "status", "repo": repo, "status": 404, "error_code": "EntryNotFound", "times": None})
        job_id = await files.fetch(FetchFiles(MODEL, then_load="autoload"), loads)
        with pytest.raises(CommandRejected) as failed:
            await files.ready(MODEL)
        assert failed.value.code == "model_failed" and f"the draft model '{repo}:Q8_0'" in failed.value.message
        assert job_id is not None and d.job(job_id).status is JobStatus.FAILED
        await files.close()
        assert loads.calls == []
