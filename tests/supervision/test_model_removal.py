"""``DELETE /models`` carried out (:mod:`service.supervision.model_removal`): what runs is stopped first,
then the files go, then the log records it. A real log, real download workers against the test Hub,
the instance supervisor's fake workers and clock (``tests/supervision/fakes.py``)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from devtools.hub_server import HubServer
from service.core import events as ev
from service.core.cache_layout import CachePaths
from service.core.contracts import DownloadSpec
from service.core.errors import CommandRejected
from service.core.prompt_cache import file_path
from service.core.state import JobStatus
from service.settings import Settings
from service.supervision.downloads import DownloadSupervisor
from service.supervision.model_removal import ModelRemover, Removed
from tests.core.examples import example
from tests.supervision.fakes import Rig, rig, until
from tests.supervision.test_downloads import MB, repo_on_hub

pytestmark = pytest.mark.timeout(90)


@dataclass
class Removal:
    r: Rig
    downloads: DownloadSupervisor
    remover: ModelRemover
    cache_dir: Path

    async def downloaded(self, hub: HubServer, size: int = MB) -> tuple[str, DownloadSpec]:
        repo, spec = await repo_on_hub(hub, size, "rm")
        job_id, _, _ = await self.downloads.request(repo, spec)
        assert job_id is not None
        await until(lambda: _status(self.r, job_id) is JobStatus.FINISHED, 45, "the download")
        return repo, spec

    def blob(self, repo: str, spec: DownloadSpec) -> Path:
        return CachePaths(self.cache_dir, repo).blob(spec.refs()[0].sha256 or "")


def _status(r: Rig, job_id: str) -> JobStatus | None:
    job = r.state.job(job_id)
    return None if job is None else job.status


@asynccontextmanager
async def removal(tmp_path: Path, hub: HubServer) -> AsyncIterator[Removal]:
    """The instance supervisor of ``fakes.rig`` (one local model, ``local``), a download supervisor on
    the same log and interpreter, and the remover over both, as the service composes them."""
    async with rig(tmp_path, models=("local",)) as r:
        settings = Settings(
            home=tmp_path,
            hf_endpoint=hub.url,
            disk_reserve_bytes=0,
            database_url=f"sqlite:///{tmp_path / 'log.db'}",  # the rig's log: the workers append there
        )
        downloads = DownloadSupervisor(settings, r.live, interpreter=r.sup.interpreter)
        try:
            yield Removal(
                r,
                downloads,
                ModelRemover(r.live, r.sup.interpreter, r.sup, downloads, settings.cache_dir),
                settings.cache_dir,
            )
        finally:
            await downloads.shutdown()


async def test_a_downloaded_model_loses_its_files_and_the_log_records_it(tmp_path: Path, hub: HubServer) -> None:
    async with removal(tmp_path, hub) as x:
        repo, spec = await x.downloaded(hub)
        assert x.blob(repo, spec).exists()
        removed = await x.remover.remove(repo, force=False)
        assert removed.model == repo and removed.bytes_freed == MB and removed.files
        assert not x.blob(repo, spec).exists()
        assert x.r.types(repo)[-1] == "model_removed" and not removed.state.models[repo].listed


async def test_its_saved_prompt_cache_goes_with_it_each_file_recorded_before_model_removed(
    tmp_path: Path, hub: HubServer
) -> None:
    async with removal(tmp_path, hub) as x:
        repo, _ = await x.downloaded(hub)
        cache = Path(file_path(x.r.sup.prompt_cache.root, repo, "entry-1.bin"))
        cache.parent.mkdir(parents=True)
        cache.write_bytes(b"k" * 64)
        await x.r.worker(repo, example(ev.PromptCacheSaved, file="entry-1.bin", bytes=64))
        await x.r.worker(repo, example(ev.PromptCacheSaved, file="/elsewhere/none.bin", bytes=1))  # gone already
        removed = await x.remover.remove(repo, force=False)
        assert not cache.parent.exists(), "the model's prompt-cache directory is deleted"
        types = x.r.types(repo)
        assert types[-3:] == ["prompt_cache_discarded", "prompt_cache_discarded", "model_removed"]
        assert removed.state.models[repo].prompt_cache == {}


async def test_a_loaded_model_is_refused_without_force_and_stopped_before_its_files_go_with_it(
    tmp_path: Path, hub: HubServer
) -> None:
    async with removal(tmp_path, hub) as x:
        repo, spec = await x.downloaded(hub)
        await x.r.sup.load(repo)
        await x.r.ready(repo)
        with pytest.raises(CommandRejected) as refused:
            await x.remover.remove(repo, force=False)
        assert refused.value.code == "model_loaded" and x.blob(repo, spec).exists()
        await x.remover.remove(repo, force=True)
        types = x.r.types(repo)
        assert types.index("instance_stopped") < types.index("model_removed")
        assert not x.blob(repo, spec).exists()


async def test_a_first_download_under_way_is_cancelled_with_its_partials_discarded_and_then_nothing_is_left(
    tmp_path: Path, hub: HubServer
) -> None:
    """The model is held and its job cancelled (discarding partials) before anything else; with no
    files ever published, the plan taken after the cancel finds no model (404), and records nothing."""
    repo, spec = await repo_on_hub(hub, 4 * MB, "rm")
    hub.set_faults({"kind": "stall", "repo": repo, "at_fraction": 0.5})
    async with removal(tmp_path, hub) as x:
        job_id, _, _ = await x.downloads.request(repo, spec)
        assert job_id is not None
        await until(lambda: (job := x.r.state.job(job_id)) is not None and job.bytes_done > 0, 45, "bytes on disk")
        with pytest.raises(CommandRejected) as gone:
            await x.remover.remove(repo, force=False)
        assert gone.value.code == "model_not_found"
        job = x.r.state.job(job_id)
        assert job is not None and job.status is JobStatus.CANCELLED and job.discard_requested
        assert not CachePaths(x.cache_dir, repo).incomplete(spec.refs()[0].sha256 or "").exists()
        assert "model_removed" not in x.r.types(repo)


async def test_an_unknown_model_is_not_found_and_a_local_file_is_not_the_caches_to_remove(
    tmp_path: Path, hub: HubServer
) -> None:
    async with removal(tmp_path, hub) as x:
        with pytest.raises(CommandRejected) as unknown:
            await x.remover.remove("nobody/none-GGUF", force=True)
        with pytest.raises(CommandRejected) as local:
            await x.remover.remove("local", force=True)
        assert (unknown.value.code, local.value.code) == ("model_not_found", "conflict")
        assert "model_removed" not in x.r.types()


async def test_two_removals_of_one_model_run_in_turn_and_the_second_finds_it_gone(
    tmp_path: Path, hub: HubServer
) -> None:
    async with removal(tmp_path, hub) as x:
        repo, _ = await x.downloaded(hub)
        results = await asyncio.gather(
            x.remover.remove(repo, force=False), x.remover.remove(repo, force=False), return_exceptions=True
        )
        assert [type(r) for r in results].count(Removed) == 1
        refused = [r for r in results if isinstance(r, CommandRejected)]
        assert [r.code for r in refused] == ["model_not_found"]
        assert x.r.types(repo).count("model_removed") == 1
