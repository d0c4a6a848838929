"""The model sources of one service: read them, plan, stop what must stop, record.

:class:`Catalogue` runs the start-up read and every reload (``GET
/models?reload=1``, ``POST /models/reload``) one at a time. Reading is I/O in
a thread (:func:`read_sources`); the decisions are the pure
:func:`~service.catalogue.desired.desired_models` and
:func:`~service.catalogue.plan.plan_catalogue`; the effects are
``InstanceSupervisor.unload`` (through its public API only) and one batch of
events, with ``models_reloaded`` saying what a reload changed.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from service.catalogue.cache_models import cache_models
from service.catalogue.desired import Desired, Listing, SingleModel, base_config, desired_models, pulled_config
from service.catalogue.disk import CachedRepo, Refusal, local_file, scan_cache, scan_models_dir
from service.catalogue.hf_source import HfSourceError, RemotePreset, resolve_hf
from service.catalogue.plan import CataloguePlan, configured, plan_catalogue
from service.core import events as ev
from service.core.cluster import own_view
from service.core.decision import Append, Decision, nothing
from service.core.errors import CommandRejected
from service.core.events import FileRef
from service.core.state import ModelConfig, RouterState
from service.event_store.live_state import LiveState
from service.llamacpp.flags import BY_NAME, handling
from service.llamacpp.presets import Preset, PresetError, read_preset
from service.settings import Settings
from service.supervision.instances import InstanceSupervisor
from service.supervision.interpreter import Interpreter

_log = structlog.get_logger(__name__)


def cache_dirs(settings: Settings) -> list[Path]:
    """The caches listed as model sources: ours (downloads land there) first, then llama.cpp's."""
    dirs: list[Path] = []
    for directory in (settings.cache_dir, settings.llama_cache):
        if directory is not None and directory.absolute() not in dirs:
            dirs.append(directory.absolute())
    return dirs


def scan_caches(settings: Settings) -> tuple[list[CachedRepo], list[Refusal]]:
    repos: list[CachedRepo] = []
    refused: list[Refusal] = []
    for directory in cache_dirs(settings):
        found, bad = scan_cache(directory)
        repos += found
        refused += bad
    return repos, refused


def _file_record(path: Path) -> FileRef:
    return FileRef(path=str(path), size=path.stat().st_size)


def _records(paths: list[Path]) -> tuple[FileRef, ...] | None:
    """The model's files, or None when one vanished while we read the dir (the next reading sees)."""
    try:
        return tuple(_file_record(p) for p in paths)
    except FileNotFoundError:
        return None


def _preset_files(preset: Preset) -> dict[str, tuple[FileRef, ...]]:
    """Each ``model =`` path a preset names -> its files (with its ``mmproj``); a path
    that cannot be used is a start-up error naming it."""
    files: dict[str, tuple[FileRef, ...]] = {}
    for section in preset.sections:
        options = {**preset.defaults.options, **section.options}
        if not options.get("model"):
            continue
        found = []
        for key in ("model", "mmproj"):
            if options.get(key):
                path, reason = local_file(options[key])
                if path is None:
                    msg = f"{preset.origin}: [{section.name}] {key} = {options[key]}: {reason}"
                    raise PresetError(msg)
                try:
                    found.append(_file_record(path))
                except OSError as exc:  # removed since local_file looked
                    msg = f"{preset.origin}: [{section.name}] {key} = {options[key]}: {exc.strerror}"
                    raise PresetError(msg) from None
        files[options["model"]] = tuple(found)
    return files


def check_preset(path: Path) -> None:
    """Parse ``path`` and check the files it names: ``PresetError`` if llama.cpp would refuse it."""
    _preset_files(read_preset(path))


@dataclass(frozen=True, slots=True)
class SourcesRead:
    """One reading of the sources: the desired models, plus what to log about it."""

    desired: dict[str, Desired]
    base: ModelConfig
    listing: Listing
    present: frozenset[str]
    refused: tuple[Refusal, ...]
    warnings: tuple[str, ...]
    exclusive: bool = True
    """The sources name every model (router mode): a model they no longer name is removed. In
    single-model mode only the one model is read, and the log's other models are left as they are."""


def read_sources(
    settings: Settings, state: RouterState, remote: RemotePreset | None, single: SingleModel | None
) -> SourcesRead:
    """Read every source (blocking: run it in a thread). Raises ``PresetError``."""
    present = frozenset(m.path for m in state.models.values() if m.path and os.path.exists(m.path))
    if single is not None:
        return _single_source(settings, single, present)
    repos, refused = scan_caches(settings)
    local: dict[str, tuple[FileRef, ...]] = {}
    if settings.models_dir is not None:
        found, bad = scan_models_dir(settings.models_dir)
        records = {name: _records(files) for name, files in found.items()}
        local = {name: files for name, files in records.items() if files is not None}
        refused += bad
    presets = [read_preset(settings.presets)] if settings.presets is not None else []
    if remote is not None:
        presets.append(read_preset(remote.path, remote=True))
    preset_files: dict[str, tuple[FileRef, ...]] = {}
    for preset in presets:
        preset_files.update(_preset_files(preset))
    listing = Listing(
        cache=cache_models(repos),
        repos=tuple(repos),
        local=local,
        presets=tuple(presets),
        preset_files=preset_files,
        single=single,
        env_layer=dict(settings.model_env_args),
        cli_layer=dict(settings.model_args),
    )
    desired, warnings = desired_models(listing)
    return SourcesRead(desired, base_config(listing), listing, present, tuple(refused), tuple(warnings))


def _single_source(settings: Settings, single: SingleModel, present: frozenset[str]) -> SourcesRead:
    """Single-model mode (``-m``/``-hf``): that model and nothing else, as llama-server serves it; the
    caches, ``--models-dir`` and ``--models-preset`` are not read (llama-server uses them as a router only)."""
    listing = Listing(single=single, env_layer=dict(settings.model_env_args), cli_layer=dict(settings.model_args))
    desired, warnings = desired_models(listing)
    unused = [
        f"--{flag}"
        for flag, value in (("models-dir", settings.models_dir), ("models-preset", settings.presets))
        if value is not None
    ]
    if unused:
        warnings.append(f"{' and '.join(unused)} ignored: -m / -hf serve one model, as llama-server does")
    return SourcesRead(desired, base_config(listing), listing, present, (), tuple(warnings), exclusive=False)


def _projector(settings: Settings) -> tuple[FileRef, ...]:
    """``--mmproj FILE`` beside ``-m``: the projector among the model's files (named ``mmproj*.gguf``,
    as llama.cpp names them: that is how a model's files tell it from the model)."""
    if settings.mmproj_file is None:
        return ()
    path, reason = local_file(str(settings.mmproj_file))
    if path is None:
        msg = f"--mmproj {settings.mmproj_file}: {reason}"
        raise HfSourceError(msg)
    if "mmproj" not in path.name.lower():
        msg = f"--mmproj {settings.mmproj_file}: name the projector mmproj*.gguf (as llama.cpp's files are named)"
        raise HfSourceError(msg)
    return (_file_record(path),)


def command_line_model(settings: Settings) -> tuple[RemotePreset | None, SingleModel | None]:
    """What ``-hf`` / ``-m`` ask for, resolved before anything runs (blocking: network).
    Raises :class:`HfSourceError` for a repo or file that cannot be served."""
    if settings.hf_repo and settings.model_file:
        msg = "-m and -hf name two different models: give one of them"
        raise HfSourceError(msg)
    if settings.model_file is not None:
        path, reason = local_file(str(settings.model_file))
        if path is None:
            msg = f"-m {settings.model_file}: {reason}"
            raise HfSourceError(msg)
        name = path.name[: -len(".gguf")] if path.name.lower().endswith(".gguf") else path.name
        return None, SingleModel(name, "preset", (_file_record(path), *_projector(settings)), aliases=settings.aliases)
    if settings.mmproj_file is not None:
        _log.warning("option_ignored", detail="--mmproj names the -m model's projector (with -hf: the repo's)")
    if not settings.hf_repo:
        if settings.aliases or settings.hf_file:
            _log.warning("option_ignored", detail="--alias and --hf-file name the -hf / -m model; there is none")
        return None, None
    repos, _ = scan_caches(settings)
    found = resolve_hf(
        settings.hf_repo,
        settings.hf_file,
        cache_dir=settings.cache_dir,
        repos=repos,
        endpoint=settings.hf_endpoint,
        token=settings.hf_token,
        offline=settings.offline,
        aliases=settings.aliases,
    )
    return (found, None) if isinstance(found, RemotePreset) else (None, found)


class Catalogue:
    """Keeps the log's models in line with the sources, at start-up and on reload."""

    def __init__(
        self,
        settings: Settings,
        live: LiveState,
        interpreter: Interpreter,
        instances: InstanceSupervisor,
        *,
        remote: RemotePreset | None = None,
        single: SingleModel | None = None,
    ) -> None:
        self.settings = settings
        self.live = live
        self.interpreter = interpreter
        self.instances = instances
        self.remote = remote
        self.single = single
        self.listing = Listing()  # the last reading: what a model pulled meanwhile is configured from
        self._lock = asyncio.Lock()
        self._said: set[str] = set()  # warnings already logged: each once per process
        self._tasks: set[asyncio.Task[Any]] = set()
        live.add_listener(self._on_event)

    async def refresh(self, *, reload: bool) -> CataloguePlan:
        """Read the sources and apply the plan; with ``reload``, also record ``models_reloaded``."""
        async with self._lock:
            read = await asyncio.to_thread(read_sources, self.settings, self.live.state, self.remote, self.single)
            self._report(read)
            # A node plans over what it holds: models only other nodes hold are theirs to list or remove.
            first = plan_catalogue(
                own_view(self.live.state, self.settings.node),
                read.desired,
                read.base,
                read.present,
                exclusive=read.exclusive,
            )
            async with contextlib.AsyncExitStack() as stack:
                for name in first.removed:
                    await stack.enter_async_context(self.instances.holding(name))  # no autoload meanwhile
                for name, reason in first.unload.items():
                    with contextlib.suppress(CommandRejected):  # it may have stopped meanwhile
                        await self.instances.unload(name, reason=reason)
                plan = await self._apply(read, reload=reload, unloaded=tuple(first.unload))
            self.listing = read.listing
            return CataloguePlan(plan.events, first.unload, plan.added, plan.changed, plan.removed)

    async def _apply(self, read: SourcesRead, *, reload: bool, unloaded: tuple[str, ...]) -> CataloguePlan:
        """Plan again over the state after the stops and append, as one decision: a
        worker's event about one of these models in between makes it plan anew."""

        def decide(state: RouterState) -> Decision[CataloguePlan]:
            plan = plan_catalogue(
                own_view(state, self.settings.node), read.desired, read.base, read.present, exclusive=read.exclusive
            )
            batch = [Append(e.event, e.model) for e in plan.events]
            if reload:
                reloaded = ev.ModelsReloaded(
                    added=plan.added, changed=plan.changed, removed=plan.removed, unloaded=unloaded
                )
                batch.append(Append(reloaded))
            return Decision(plan, tuple(batch))

        applied = await self.interpreter.apply(decide)
        return applied.answer

    def _once(self, key: str, event: str, **fields: Any) -> None:
        if key not in self._said:
            self._said.add(key)
            _log.warning(event, **fields)

    def _report(self, read: SourcesRead) -> None:
        for refusal in read.refused:
            self._once(f"refused:{refusal.path}", "model_file_refused", path=refusal.path, reason=refusal.reason)
        for warning in read.warnings:
            self._once(warning, "catalogue_warning", detail=warning)
        for key, models in _ignored(read.desired.values()).items():
            arg = BY_NAME.get(key)
            reason = handling(arg).note if arg is not None else "not honoured"
            self._once(f"ignored:{key}", "option_ignored", option=key, reason=reason, models=models[:5])

    def _on_event(self, recorded: ev.Recorded, state: RouterState) -> None:
        """A model downloaded by ``POST /models`` gets its settings (its preset section's, else
        the command line's, env's and ``[*]``'s) as soon as it is requested: its first load uses them."""
        if recorded.type != "download_requested" or recorded.model is None:
            return
        model = state.models.get(recorded.model)
        if model is None or model.config != ModelConfig():
            return
        config = pulled_config(self.listing, recorded.model)
        if config != ModelConfig():
            task = asyncio.ensure_future(self._configure(recorded.model, config))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _configure(self, name: str, config: ModelConfig) -> None:
        def decide(state: RouterState) -> Decision[None]:
            model = state.models.get(name)
            if model is None or model.config != ModelConfig():
                return nothing(None)
            event = configured(name, config)
            return Decision(None, (Append(event.event, event.model),))

        try:
            await self.interpreter.apply(decide)
        except Exception:  # the tail is down: the next reload or restart applies it
            _log.exception("configure_failed", model=name)


def _ignored(desired: Iterable[Desired]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for d in desired:
        for key in d.config.ignored:
            found.setdefault(key, []).append(d.name)
    return found
