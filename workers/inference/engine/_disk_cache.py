"""The prompt cache outlives the worker (issue 35): saved to disk at a planned stop, restored at load.

* **Save** (:meth:`DiskCacheMixin.persist_prompt_cache`): once the engine thread has drained and left its
  loop (so nothing else touches the context), the idle slots' sequences and the RAM prompt cache's
  entries are ranked by length times recency and written, best first, within ``--cache-disk-max`` bytes
  and ``SAVE_BOUND_S`` seconds (the next file is skipped when the rate of the first says it would not
  finish in time). Files already in the directory count against the budget: the oldest go first.
* **Restore** (:meth:`DiskCacheMixin.restore_at_load`, on the engine thread before ``instance_ready``): a
  file whose model sha256 or settings differ, or that does not read back, is deleted and recorded as
  ``prompt_cache_discarded``; the others go into the RAM prompt cache (into idle slots with ``--cache-ram
  0``), newest first, for about ``EAGER_BOUND_S`` seconds; the rest are read when a request's prompt
  needs them (``lazy``). A request then takes an entry exactly as an in-memory prompt-cache hit.

Without ``--model-sha256`` the hash is computed on a thread after the load (a few seconds for a large
model, never before ready): the files are restored lazily once it is known, and a stop before that
saves nothing. A request that arrives meanwhile and that a saved file would serve waits for the hash
(the engine pauses for it) rather than compute its prefix again. The file format is :mod:`._disk_files`'s.
"""

from __future__ import annotations

import ctypes
import hashlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from service.core.prompt_cache_events import PromptCacheDiscarded, PromptCacheRestored, PromptCacheSaved
from workers.inference.engine._disk_files import (
    Candidate,
    CorruptFile,
    Header,
    Settings,
    file_name,
    listing,
    mismatch,
    over_budget,
    prefix_sha256,
    ranked,
    read_header,
    read_state,
    within,
    write_entry,
)
from workers.inference.engine._prompt_cache import MIN_KEEP, CachedPrompt, PromptCache, cacheable
from workers.inference.engine._slots import Slot, common_prefix

if TYPE_CHECKING:
    from service.core.event_base import Event
    from workers.inference.llama import LlamaModel

SAVE_BOUND_S = 5.0  # a save never holds the stop longer than this (issue 35's default bound)
EAGER_BOUND_S = 1.0  # restored before ready for about this long; the rest on demand
HASH_CHUNK = 8 * 1024 * 1024


@dataclass
class PromptDisk:
    """Where and how the worker keeps its prompt cache on disk (``--prompt-cache-dir``)."""

    directory: Path
    max_bytes: int  # --cache-disk-max; 0: neither saved nor restored
    instance_id: str
    model_path: str
    model_sha256: str | None  # --model-sha256; None: hashed on a thread after the load
    lora_specs: tuple[tuple[str, float], ...]
    emit: Callable[[Event], None]
    log: Callable[..., None]  # log(event, **fields): the worker's structured log
    save_bound_s: float = SAVE_BOUND_S
    eager_bound_s: float = EAGER_BOUND_S
    lazy: list[Header] = field(default_factory=list)  # matching files not read yet (engine thread only)
    unverified: list[Header] = field(default_factory=list)  # the files while the model's hash is not known
    hashing: bool = False  # the hash thread runs (read and written under the engine's condition)

    @property
    def enabled(self) -> bool:
        return self.max_bytes > 0


def file_sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(HASH_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def serves(header: Header, prompt: list[int]) -> bool:
    """The saved entry is worth reading for this prompt: as much of it is reused as a RAM entry needs."""
    return common_prefix(header.tokens, prompt) >= max(1, MIN_KEEP * len(header.tokens))


def readable_headers(directory: Path) -> list[Header]:
    """The headers of the directory's files that read back, checked against nothing yet."""
    headers = []
    for path, _, _ in listing(directory)[0]:
        try:
            headers.append(read_header(path))
        except CorruptFile:
            continue  # the restore after the hash discards and records it
    return headers


class DiskCacheMixin:
    """The batch engine's side of the disk cache; every method runs where nothing else uses the context."""

    llm: LlamaModel | None
    slots: list[Slot]
    prompt_cache: PromptCache | None
    disk: PromptDisk | None = None
    _disk_due: bool = False  # the model's hash became known: restore on the engine thread
    _cv: threading.Condition

    def disk_settings(self) -> Settings:
        """What a saved state's layout depends on: a restore needs the same (else ``settings_changed``)."""
        llm, disk = self.llm, self.disk
        assert llm is not None and disk is not None
        cfg = llm.cfg
        return {
            "n_ctx_seq": llm.n_ctx,
            "type_k": cfg.type_k,
            "type_v": cfg.type_v,
            "flash_attn": cfg.flash_attn,
            "swa_full": bool(cfg.swa_full),
            "lora": [[path, scale] for path, scale in disk.lora_specs],
        }

    # -- load -------------------------------------------------------------------------------------

    def restore_at_load(self) -> None:
        """Engine thread, after the model loaded and before ``instance_ready``."""
        disk = self.disk
        if disk is None or not disk.enabled or self.llm is None:
            return
        disk.directory.mkdir(parents=True, exist_ok=True)
        _, tmps = listing(disk.directory)
        for tmp in tmps:  # a save cut off by a crash: never a valid entry, and never recorded
            tmp.unlink(missing_ok=True)
            disk.log("prompt_cache_leftover_deleted", file=str(tmp))
        if disk.model_sha256 is None:
            disk.unverified = readable_headers(disk.directory)
            disk.hashing = True
            threading.Thread(target=self._hash_model, name="model-sha256", daemon=True).start()
            return
        self._restore(lazy_all=False)

    def _hash_model(self) -> None:
        disk = self.disk
        assert disk is not None
        t0 = time.monotonic()
        try:
            digest = file_sha256(disk.model_path)
        except OSError as exc:
            disk.log("prompt_cache_hash_failed", error=str(exc))
            with self._cv:
                disk.hashing = False
                self._cv.notify_all()
            return
        disk.log("model_sha256", sha256=digest, ms=round((time.monotonic() - t0) * 1000.0, 1))
        with self._cv:
            disk.model_sha256 = digest
            disk.hashing = False
            self._disk_due = True
            self._cv.notify_all()

    def _restore(self, *, lazy_all: bool) -> None:
        """Check every file; restore the matching ones, newest first, for ``eager_bound_s`` (none with
        ``lazy_all``), and keep the others for the requests that need them."""
        disk = self.disk
        assert disk is not None and disk.model_sha256 is not None
        settings = self.disk_settings()
        files, _ = listing(disk.directory)
        good: list[Header] = []
        for path, size, _ in files:
            try:
                header = read_header(path)
                why = mismatch(header, disk.model_sha256, settings)
            except CorruptFile:
                why = "corrupt"
            if why is None:
                good.append(header)
            else:
                self._discard(path, why, size)
        good.sort(key=lambda h: h.mtime, reverse=True)
        t0, done = time.monotonic(), 0
        for i, header in enumerate(good):
            spent = time.monotonic() - t0
            rate = done / spent if done and spent > 0 else 0.0
            late = lazy_all or (i > 0 and rate > 0 and spent + header.state_bytes / rate > disk.eager_bound_s)
            if late and self.prompt_cache is not None:
                disk.lazy.extend(good[i:])
                disk.log("prompt_cache_lazy", files=len(good) - i)
                return
            if self._restore_one(header, lazy=False):
                done += header.state_bytes

    def _discard(self, path: Path, reason: str, size: int) -> None:
        disk = self.disk
        assert disk is not None
        path.unlink(missing_ok=True)
        disk.emit(PromptCacheDiscarded(file=str(path), reason=reason, instance_id=disk.instance_id, bytes=size))
        disk.log("prompt_cache_discarded", file=str(path), reason=reason)

    def _restore_one(self, header: Header, *, lazy: bool) -> bool:
        """One file into the RAM prompt cache (or an empty idle slot without one)."""
        llm, disk, cache = self.llm, self.disk, self.prompt_cache
        assert llm is not None and disk is not None
        lora = llm.lora.key
        try:
            if cache is not None:
                if not cache.admits(header.tokens, lora, header.state_bytes):
                    return False
                data = (ctypes.c_uint8 * header.state_bytes)()
                read_state(header, data)
                cache.add(CachedPrompt(list(header.tokens), lora, data))
            elif not self._restore_into_slot(header, lora):
                return False
        except CorruptFile:
            self._discard(header.path, "corrupt", header.size)
            return False
        disk.emit(
            PromptCacheRestored(
                instance_id=disk.instance_id,
                file=str(header.path),
                tokens=len(header.tokens),
                bytes=header.size,
                lazy=lazy,
            )
        )
        disk.log("prompt_cache_restored", file=str(header.path), tokens=len(header.tokens), lazy=lazy)
        return True

    def _restore_into_slot(self, header: Header, lora: tuple[tuple[int, float], ...]) -> bool:
        llm = self.llm
        assert llm is not None
        slot = next((s for s in self.slots if not s.is_processing and not s.cache), None)
        if slot is None:
            return False
        data = (ctypes.c_uint8 * header.state_bytes)()
        read_state(header, data)
        if int(llm.lc.llama_state_seq_set_data(llm.ctx, data, header.state_bytes, slot.id)) != header.state_bytes:
            llm.seq_rm(slot.id, 0, -1)
            raise CorruptFile("llama.cpp refused the state")
        slot.cache.extend(header.tokens)
        slot.lora = lora
        return True

    def _restore_due(self) -> None:
        """Engine thread, between steps: the hash became known after the load."""
        self._disk_due = False
        assert self.disk is not None
        self.disk.unverified = []
        self._restore(lazy_all=True)

    def _restore_for(self, prompt: list[int]) -> None:
        """Engine thread, holding ``_cv``, before a request takes a slot: read the waiting files its prompt
        starts with; first wait for the model's hash when one of the files not checked yet would serve it."""
        disk = self.disk
        if disk is None or not prompt:
            return
        if disk.hashing and any(serves(h, prompt) for h in disk.unverified):
            disk.log("prompt_cache_waits_for_hash", files=len(disk.unverified))
            self._cv.wait_for(lambda: not disk.hashing)
        if self._disk_due:
            self._restore_due()
        wanted = [h for h in disk.lazy if serves(h, prompt)]
        for header in wanted:
            disk.lazy.remove(header)
            self._restore_one(header, lazy=True)

    # -- stop -------------------------------------------------------------------------------------

    def persist_prompt_cache(self) -> None:
        """At a planned stop, the engine loop ended: write the most valuable entries (module docstring)."""
        disk, llm = self.disk, self.llm
        if disk is None or not disk.enabled or llm is None:
            return
        if disk.model_sha256 is None:
            disk.log("prompt_cache_not_saved", why="the model's sha256 is not known yet")
            return
        t0 = time.monotonic()
        candidates = self._candidates()
        chosen = within(ranked(candidates), disk.max_bytes)
        settings = self.disk_settings()
        keep: set[Path] = set()
        written = 0
        for i, c in enumerate(chosen):
            spent = time.monotonic() - t0
            if written and spent + c.size * spent / written > disk.save_bound_s:
                disk.log("prompt_cache_save_cut", written=i, skipped=len(chosen) - i, ms=round(spent * 1000.0, 1))
                break
            path = disk.directory / file_name(prefix_sha256(c.tokens))
            if self._still_valid(path, settings):
                path.touch()  # the same tokens on the same model: the file holds this state already
                keep.add(path)
                continue
            data = c.source.data if isinstance(c.source, CachedPrompt) else self._copy_slot(c.source, c.size)
            if data is None:
                continue
            size, digest = write_entry(path, disk.model_sha256, settings, c.tokens, data)
            written += size
            keep.add(path)
            disk.emit(
                PromptCacheSaved(
                    instance_id=disk.instance_id,
                    file=str(path),
                    tokens=len(c.tokens),
                    bytes=size,
                    prefix_sha256=digest,
                    model_sha256=disk.model_sha256,
                    settings=settings,
                )
            )
        files, _ = listing(disk.directory)
        sizes = {p: s for p, s, _ in files}
        for path in over_budget(files, keep, disk.max_bytes):
            self._discard(path, "budget", sizes[path])
        disk.log("prompt_cache_saved", files=len(keep), bytes=written, ms=round((time.monotonic() - t0) * 1000.0, 1))

    def _still_valid(self, path: Path, settings: Settings) -> bool:
        disk = self.disk
        assert disk is not None and disk.model_sha256 is not None
        try:
            return mismatch(read_header(path), disk.model_sha256, settings) is None
        except CorruptFile:
            return False

    def _candidates(self) -> list[Candidate]:
        """The RAM cache's entries (oldest first) then the idle slots (by last use): their recency ranks."""
        llm = self.llm
        assert llm is not None
        lora = llm.lora.key
        out: list[Candidate] = []
        if self.prompt_cache is not None:
            for e in self.prompt_cache.entries:
                if e.lora == lora:
                    out.append(Candidate(list(e.tokens), e.size, len(out), e))
        for s in sorted(self.slots, key=lambda s: s.last_used):
            if not s.is_processing and cacheable(s) and s.lora == lora:
                size = int(llm.lc.llama_state_seq_get_size(llm.ctx, s.id))
                if size > 0:
                    out.append(Candidate(list(s.cache), size, len(out), s))
        return out

    def _copy_slot(self, slot: Slot, size: int) -> Any:
        llm = self.llm
        assert llm is not None
        data = (ctypes.c_uint8 * size)()
        if int(llm.lc.llama_state_seq_get_data(llm.ctx, data, size, slot.id)) != size:
            return None
        return data
