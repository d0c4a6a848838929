"""A model's GGUF header read before its first placement, and this node's memory budget
(:mod:`service.supervision.measure`): real files, a real log, the fold read back."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from devtools.tiny_gguf import write_tiny_gguf
from service.settings import Settings
from service.supervision.measure import Measurer, machine_memory, memory_budget
from tests.supervision.fakes import rig

TOTAL = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def test_the_machines_memory_is_lowered_to_its_cgroups_limit(tmp_path: Path) -> None:
    limit = tmp_path / "memory.max"
    limit.write_text("1048576\n")
    assert machine_memory(limit) == 1048576
    limit.write_text("max\n")  # no limit
    assert machine_memory(limit) == TOTAL
    assert machine_memory(tmp_path / "missing") == TOTAL  # no cgroup v2
    limit.write_text(f"{TOTAL * 2}\n")
    assert machine_memory(limit) == TOTAL


def test_the_budget_is_the_memory_less_its_margin(tmp_path: Path) -> None:
    assert memory_budget(Settings(home=tmp_path, memory_bytes=1000, models_memory_margin="10%")) == 900
    assert memory_budget(Settings(home=tmp_path, memory_bytes=1000, models_memory_margin="0%")) == 1000
    assert memory_budget(Settings(home=tmp_path, memory_bytes=1000, models_memory_margin="2K")) == 0


async def test_a_models_header_is_read_once_and_its_shape_recorded(tmp_path: Path) -> None:
    gguf = write_tiny_gguf(tmp_path / "tiny.gguf")
    async with rig(tmp_path, models=("a",), files={"a": gguf}) as r:
        measurer = Measurer(r.live, r.sup.interpreter)
        await measurer.ensure("a")
        await measurer.ensure("a")  # measured: the log has it, nothing is read again
        assert r.types("a") == ["model_discovered", "model_measured"]
        measured = r.state.models["a"].shape
        assert measured is not None and measured.path == str(gguf) and measured.n_layer == 2


async def test_a_missing_or_unreadable_file_is_placed_by_count_and_not_read_again(tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.gguf"
    garbage.write_bytes(b"not a gguf at all" * 100)
    async with rig(tmp_path, models=("bad", "gone"), files={"bad": garbage}) as r:
        measurer = Measurer(r.live, r.sup.interpreter)
        await asyncio.gather(measurer.ensure("bad"), measurer.ensure("gone"), measurer.ensure("unknown"))
        write_tiny_gguf(garbage)  # now readable, but a path given up is not read again in this run
        await measurer.ensure("bad")
        assert "model_measured" not in r.types()
        assert r.state.models["bad"].shape is None and r.state.models["gone"].shape is None
