"""The models the sources say should exist, with their settings: llama.cpp's ``load_models``. Pure.

Sources, as in llama.cpp's router, lowest first: the model caches (every
cached ``user/repo:TAG``), the models dir (replaces a cache entry of the same
name), then preset sections (merged onto an entry of the same name, else new;
their source becomes ``preset``). modelrouter adds the ``-hf``/``-m`` model of
llama-server's single-model mode. Every model's options are the merge of the
``LLAMA_ARG_*`` environment, the preset's ``[*]``, its section, and the
router's command line (:mod:`service.llamacpp.options`).

A preset section without a model source (no ``model``, no ``hf-repo``, no
entry of its name) is left out with a warning: llama.cpp lists it and then
spawns a nested router that hangs (llama.cpp #27351).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field

from service.catalogue.cache_models import CacheModel, find_in_cache
from service.catalogue.disk import CachedRepo
from service.core.events import FileRef
from service.core.model_spec import InvalidModelName, parse_model_spec
from service.core.state import ModelConfig
from service.llamacpp.options import ModelSettings, OptionError, Options, merge, model_settings
from service.llamacpp.presets import Preset, PresetError, Section

Files = tuple[FileRef, ...]


@dataclass(frozen=True, slots=True)
class SingleModel:
    """The model of ``-hf``/``-m``: served and loaded at start, as llama-server's single-model mode."""

    name: str
    source: str
    files: Files = ()
    hf_repo: str | None = None
    hf_file: str | None = None
    aliases: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Listing:
    """Everything the sources said at one moment (read by the caller, so this stays pure)."""

    cache: Mapping[str, CacheModel] = field(default_factory=dict)
    repos: tuple[CachedRepo, ...] = ()
    local: Mapping[str, Files] = field(default_factory=dict)
    presets: tuple[Preset, ...] = ()
    preset_files: Mapping[str, Files] = field(default_factory=dict)  # a preset's `model =` path -> its files
    single: SingleModel | None = None
    env_layer: Options = field(default_factory=dict)
    cli_layer: Options = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Desired:
    """One model as the sources describe it; ``files`` empty: an hf-repo preset not downloaded yet."""

    name: str
    source: str
    files: Files
    config: ModelConfig

    @property
    def path(self) -> str | None:
        if not self.files:
            return None
        first = self.files[0]
        return first.local_path


@dataclass
class _Entry:
    source: str
    files: Files
    section: Section | None = None
    defaults: Section | None = None
    single: SingleModel | None = None


def _settings(listing: Listing, entry: _Entry | None) -> ModelSettings:
    """Merge env < [*] < section < command line, and translate."""
    defaults = [p.defaults for p in listing.presets] if entry is None or entry.defaults is None else [entry.defaults]
    section = entry.section if entry is not None else None
    layers = [listing.env_layer, *(d.options for d in defaults), section.options if section else {}]
    extras: dict[str, str] = {}
    for d in defaults:
        extras.update(d.extras)
    extras.update(section.extras if section else {})
    options = merge([*layers, listing.cli_layer])
    single = entry.single if entry is not None else None
    if single is not None:
        options.update({"hf-repo": single.hf_repo or "", "hf-file": single.hf_file or "", "load-on-startup": "1"})
        options = {k: v for k, v in options.items() if v}
    return model_settings(options, extras, aliases=single.aliases if single else ())


def base_config(listing: Listing) -> ModelConfig:
    """The settings of a model no source names (a download by ``POST /models``): env, ``[*]``, command line."""
    return _settings(listing, None).config


def pulled_config(listing: Listing, name: str) -> ModelConfig:
    """The settings a model pulled by ``POST /models`` gets at once: its preset section's
    if one is named after it (llama.cpp re-reads its sources when a download finishes),
    else the common ones. An unusable section leaves the common ones."""
    for preset in reversed(listing.presets):
        for section in preset.sections:
            if section.name == name:
                try:
                    return _settings(listing, _Entry("preset", (), section, preset.defaults)).config
                except OptionError:
                    break
    return base_config(listing)


def _preset_entry(listing: Listing, preset: Preset, section: Section, current: _Entry | None) -> _Entry | None:
    options = merge([preset.defaults.options, section.options])
    files: Files = current.files if current is not None else ()
    path = options.get("model")
    if path:
        files = listing.preset_files.get(path, ())
    elif options.get("hf-repo"):
        files = _cached_hf(listing, options["hf-repo"], options.get("hf-file"))
    elif current is None:
        return None
    return _Entry("preset", files, section, preset.defaults)


def _cached_hf(listing: Listing, hf_repo: str, hf_file: str | None) -> Files:
    try:
        spec = parse_model_spec(hf_repo)
    except InvalidModelName as exc:
        raise OptionError(f"hf-repo = {hf_repo!r}: {exc}") from None
    found = find_in_cache(listing.repos, spec.repo, spec.quant, hf_file)
    return found.files if found is not None else ()


def _entries(listing: Listing, warnings: list[str]) -> dict[str, _Entry]:
    entries = {name: _Entry("cache", m.files) for name, m in listing.cache.items()}
    entries.update({name: _Entry("models_dir", files) for name, files in listing.local.items()})
    for preset in listing.presets:
        for section in preset.sections:
            try:
                entry = _preset_entry(listing, preset, section, entries.get(section.name))
            except OptionError as exc:
                raise PresetError(f"{preset.origin}: [{section.name}] {exc}") from None
            if entry is None:
                warnings.append(f"{preset.origin}: [{section.name}] has no model source (model or hf-repo): skipped")
            else:
                entries[section.name] = entry
    if listing.single is not None:
        single = listing.single
        current = entries.get(single.name)
        entries[single.name] = _Entry(
            single.source,
            single.files or (current.files if current else ()),
            current.section if current else None,
            None,
            single,
        )
    return entries


def _hidden(listing: Listing, entries: Mapping[str, _Entry], settings: Mapping[str, ModelSettings]) -> set[str]:
    """Cache entries a ``dedup-cache-models`` preset resolves to (same first file): its
    ``hf-repo``'s, and its draft's (``spec-draft-hf``), as server-models.cpp hides them."""
    paths: set[str] = set()
    for name, s in settings.items():
        if not s.dedup or entries[name].source != "preset":
            continue
        if s.config.hf_repo and entries[name].files:
            paths.add(str(entries[name].files[0].snapshot_path))
        draft = s.config.args.get("hf-repo-draft", "").strip()
        if draft:
            try:
                files = _cached_hf(listing, draft, s.config.args.get("model-draft") or None)
            except OptionError:
                continue  # a draft repo that is not a name: nothing of it is cached
            if files:
                paths.add(str(files[0].snapshot_path))
    return {
        name
        for name, e in entries.items()
        if e.source == "cache" and listing.cache.get(name) and listing.cache[name].path in paths
    }


def desired_models(listing: Listing) -> tuple[dict[str, Desired], list[str]]:
    """``(name -> Desired, warnings)``. Raises ``PresetError`` naming the file, section
    and key of a value llama-server would refuse."""
    warnings: list[str] = []
    entries = _entries(listing, warnings)
    settings: dict[str, ModelSettings] = {}
    for name, entry in entries.items():
        try:
            settings[name] = _settings(listing, entry)
        except OptionError as exc:
            where = f"[{entry.section.name}]" if entry.section else "the command line or LLAMA_ARG_* variables"
            raise PresetError(f"{name}: {where}: {exc}") from None
    hidden = _hidden(listing, entries, settings)
    desired = {}
    for name, entry in sorted(entries.items()):
        config = settings[name].config
        if name in hidden:
            config = dataclasses.replace(config, hidden=True)
        desired[name] = Desired(name, entry.source, entry.files, config)
    _unique_aliases(desired, warnings)
    return desired, warnings


def _unique_aliases(desired: dict[str, Desired], warnings: list[str]) -> None:
    """Drop an alias that names a model or another model's alias (llama.cpp refuses
    these at start and skips them on reload): names must resolve to one model."""
    taken: dict[str, str] = {}
    for name, d in desired.items():
        kept = []
        for alias in d.config.aliases:
            clash = alias if alias in desired else taken.get(alias)
            if clash is not None and clash != name:
                warnings.append(f"alias {alias!r} of {name!r} conflicts with model {clash!r}: skipped")
                continue
            taken[alias] = name
            kept.append(alias)
        if len(kept) != len(d.config.aliases):
            desired[name] = dataclasses.replace(d, config=dataclasses.replace(d.config, aliases=tuple(kept)))
