"""The service's side of the prompt cache on disk (:mod:`service.supervision.prompt_cache`): the total
budget applied once a worker's saves are in the log (after its exit), and a removed model's files.
A real log and real files; the instance supervisor's fake workers (``tests/supervision/fakes.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.core import events as ev
from service.core.prompt_cache import file_path
from tests.supervision.fakes import Rig, rig, until

pytestmark = pytest.mark.timeout(60)


async def saved(r: Rig, model: str, file: str, size: int) -> Path:
    """``file`` of ``size`` bytes written in ``model``'s directory and recorded, as its worker does."""
    path = Path(file_path(r.sup.prompt_cache.root, model, file))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"k" * size)
    event = ev.PromptCacheSaved(
        instance_id=f"old-{model}", file=file, tokens=size, bytes=size, prefix_sha256="p", model_sha256="m"
    )
    await r.worker(model, event)
    return path


async def test_after_a_worker_exits_the_least_recently_used_files_go_until_the_total_fits(tmp_path: Path) -> None:
    async with rig(tmp_path, cache_disk_total=1000) as r:
        found: list[tuple[str | None, ev.PromptCacheDiscarded]] = []
        r.live.add_listener(
            lambda rec, _s: found.append((rec.model, rec.event)) if rec.type == "prompt_cache_discarded" else None
        )
        oldest = await saved(r, "a", "old.bin", 600)
        newer = await saved(r, "b", "new.bin", 300)
        await r.sup.load("c")
        await r.ready("c")
        latest = await saved(r, "c", "latest.bin", 300)  # saved by c's worker as it stops
        await r.sup.unload("c")
        await until(lambda: bool(found), what="the budget's discard recorded")
        assert [(m, e.file, e.reason, e.bytes) for m, e in found] == [("a", "old.bin", "budget", 600)]
        assert not oldest.exists() and newer.exists() and latest.exists()
        assert "old.bin" not in r.state.models["a"].prompt_cache
        assert sum(e.bytes for m in r.state.models.values() for e in m.prompt_cache.values()) == 600


async def test_within_the_budget_an_exit_deletes_nothing(tmp_path: Path) -> None:
    async with rig(tmp_path, cache_disk_total=10_000) as r:
        kept = await saved(r, "a", "one.bin", 600)
        await r.sup.load("a")
        await r.ready("a")
        await r.sup.unload("a")
        assert await r.sup.prompt_cache.enforce_budget() == []
        assert kept.exists() and "prompt_cache_discarded" not in r.types()


async def test_a_removed_models_directory_goes_and_each_known_file_is_recorded(tmp_path: Path) -> None:
    async with rig(tmp_path) as r:
        one = await saved(r, "a", "one.bin", 10)
        stray = one.parent / "entry.bin.tmp-123"  # a save cut off: unknown to the log, deleted all the same
        stray.write_bytes(b"x")
        other = await saved(r, "b", "two.bin", 10)
        assert await r.sup.prompt_cache.remove_model("a") == ["one.bin"]
        assert not one.parent.exists() and other.exists()
        assert r.types("a")[-1] == "prompt_cache_discarded"
        await until(lambda: not r.state.models["a"].prompt_cache, what="the discard folded")
        assert r.state.models["b"].prompt_cache


async def test_at_start_the_last_shutdowns_saves_are_brought_within_the_budget(tmp_path: Path) -> None:
    async with rig(tmp_path, cache_disk_total=500) as r:
        oldest = await saved(r, "a", "old.bin", 400)
        newest = await saved(r, "b", "new.bin", 400)
        assert await r.sup.load_on_startup() == []
        assert not oldest.exists() and newest.exists()
        assert [e.file for m in r.state.models.values() for e in m.prompt_cache.values()] == ["new.bin"]


async def test_a_recorded_name_outside_the_cache_is_never_deleted(tmp_path: Path) -> None:
    async with rig(tmp_path, cache_disk_total=1) as r:
        outside = tmp_path / "precious.txt"
        outside.write_text("keep me")
        inside = await saved(r, "a", "x.bin", 10)
        for name in (str(outside), "../../precious.txt"):
            event = ev.PromptCacheSaved(
                instance_id="i", file=name, tokens=1, bytes=10, prefix_sha256="p", model_sha256="m"
            )
            await r.worker("a", event)
        chosen = await r.sup.prompt_cache.enforce_budget()
        assert len(chosen) == 3 and not inside.exists()
        assert outside.read_text() == "keep me"
