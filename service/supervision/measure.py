"""Reading a model's GGUF header before its first placement, and this node's memory budget.

Both are observations the core cannot make: the header (file I/O, in a
thread) becomes ``model_measured`` through the interpreter, so placement
reads the need from the fold; the budget (the machine's RAM, or a
container's cgroup limit, less ``--models-memory-margin``) is read once at
start and handed to every decision as a fact.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import structlog

from service.core import events as ev
from service.core.cluster import own_view
from service.core.decision import Append
from service.core.draft_source import draft_model, file_model
from service.core.measuring import ToMeasure, decide_measured, to_measure
from service.core.memory import launch_of, parse_margin
from service.event_store.live_state import LiveState
from service.llamacpp.gguf_shape import NotMeasurable, measure
from service.settings import Settings
from service.supervision.interpreter import Interpreter

_log = structlog.get_logger(__name__)
_CGROUP_LIMIT = Path("/sys/fs/cgroup/memory.max")
_READ_TIMEOUT = 10.0  # a header read that takes longer (a hung network mount) is given up: placed by count


def physical_memory() -> int:
    """The machine's RAM, in bytes."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def machine_memory(cgroup_limit: Path = _CGROUP_LIMIT) -> int:
    """The RAM this process may use: the machine's, or its cgroup v2 limit when lower."""
    total = physical_memory()
    try:
        text = cgroup_limit.read_text().strip()
    except OSError:
        return total
    return min(total, int(text)) if text.isdigit() else total  # "max": no limit


def memory_budget(settings: Settings) -> int:
    """The bytes this node's models may use: its memory less the margin."""
    total = settings.memory_bytes or machine_memory()
    return max(total - parse_margin(settings.models_memory_margin, total), 0)


class Measurer:
    """Reads each model file's header once; a file that cannot be read is placed by count alone.

    Reads run in threads, side by side, but each caller gets its answer in arrival order: a request
    whose header read finished first must not join the queue ahead of one that arrived before it."""

    def __init__(self, live: LiveState, interpreter: Interpreter, node: str | None = None) -> None:
        self._live = live
        self._node = node  # in a cluster, only the files this node holds can be read here
        self._interpreter = interpreter
        self._unreadable: set[str] = set()
        self._last_turn: asyncio.Future[None] | None = None  # the latest caller still reading

    async def ensure(self, name: str) -> None:
        """Record ``name``'s shape in the log unless it is there already."""
        wanted = to_measure(own_view(self._live.state, self._node), name)
        if wanted is None or wanted.path in self._unreadable:
            return
        if not Path(wanted.path).is_file():  # decided at once, with no await: the request keeps its place
            self._unreadable.add(wanted.path)
            _log.warning("model_not_measured", model=wanted.model, path=wanted.path, reason="not a regular file")
            return
        earlier, mine = self._last_turn, asyncio.get_running_loop().create_future()
        self._last_turn = mine
        try:
            measured = await self._read(wanted)
            if earlier is not None:
                await asyncio.shield(earlier)  # the callers before this one answer first
            if measured is not None:
                await self._interpreter.apply(
                    lambda s: decide_measured(own_view(s, self._node), measured, wanted.model)
                )
        finally:
            _end_turn(mine, earlier)
            if self._last_turn is mine:
                self._last_turn = None

    async def ensure_draft(self, name: str) -> None:
        """``name``'s draft model (``hf-repo-draft``, or a listed model's file as ``-md``), measured as
        its target is: its memory is placed with it. A Hub draft whose file is gone from this node's disk
        (deleted by hand) is recorded ``model_removed``, a fact, so the load downloads it again rather than
        fail in the worker."""
        state = own_view(self._live.state, self._node)
        model = state.resolve(name)
        if model is None:
            return
        draft = draft_model(state, model)
        if draft is None:
            local = file_model(state, launch_of(model.config.params).spec_draft_model)
            if local is not None:
                await self.ensure(local.name)
            return
        if draft.path is None or draft.instance is not None:
            return
        if await asyncio.to_thread(Path(draft.path).is_file):
            await self.ensure(draft.name)
            return
        _log.warning("draft_files_missing", model=model.name, draft=draft.name, path=draft.path)
        gone = ev.ModelRemoved(files=tuple(f.local_path for f in draft.files))
        await self._interpreter.record([Append(gone, draft.name)])

    async def _read(self, wanted: ToMeasure) -> ev.ModelMeasured | None:
        try:
            async with asyncio.timeout(_READ_TIMEOUT):  # not wait_for: on 3.11 it can swallow a cancellation
                return await asyncio.to_thread(measure, Path(wanted.path), wanted.weights_bytes)
        except (NotMeasurable, TimeoutError) as exc:
            self._unreadable.add(wanted.path)
            _log.warning("model_not_measured", model=wanted.model, path=wanted.path, reason=str(exc) or "timed out")
            return None


def _end_turn(mine: asyncio.Future[None], earlier: asyncio.Future[None] | None) -> None:
    """Let the next caller go, but never before the earlier ones (a cancelled caller keeps the chain)."""
    if earlier is None or earlier.done():
        mine.set_result(None)
    else:
        earlier.add_done_callback(lambda _: _end_turn(mine, None) if not mine.done() else None)
