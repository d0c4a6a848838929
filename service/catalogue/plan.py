"""Bring the log in line with the sources: events out of (state, desired models). Pure.

At start-up and at every reload the service reads its sources and calls
:func:`plan_catalogue`; a restart or reload that finds nothing new appends
nothing. What it decides, per model:

* new or moved files: ``model_discovered`` (with the source, so the audit
  trail says where every model came from);
* settings that differ from the log: ``model_configured``;
* a model no source names any more: ``model_removed`` (and its settings
  reset), after its instance is stopped with reason ``removed``. Not removed:
  a model still downloading, and one downloaded by ``POST /models`` whose
  files are still on disk (llama.cpp would list it only by its tag; it keeps
  the settings every model gets);
* a changed model that is running is stopped (reason ``reload``), so that
  the next load uses its new settings, as llama.cpp does on reload.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from service.catalogue.desired import Desired
from service.core import events as ev
from service.core.state import ModelConfig, ModelState, RouterState
from service.event_store.codec import NewEvent


@dataclass(frozen=True, slots=True)
class CataloguePlan:
    """The events to append, the running models to stop first (name -> reason), and the summary."""

    events: tuple[NewEvent, ...] = ()
    unload: Mapping[str, str] = field(default_factory=dict)
    added: tuple[str, ...] = ()
    changed: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()


def configured(name: str, config: ModelConfig) -> NewEvent:
    """``model_configured`` carrying ``config`` whole."""
    event = ev.ModelConfigured(
        aliases=config.aliases,
        params=dict(config.params),
        ttl_seconds=config.ttl_seconds,
        restart=config.restart,
        load_on_startup=config.load_on_startup,
        args=dict(config.args),
        ignored=config.ignored,
        hf_repo=config.hf_repo,
        hf_file=config.hf_file,
        stop_timeout=config.stop_timeout,
        hidden=config.hidden,
        sleep_idle_seconds=config.sleep_idle_seconds,
        pinned=config.pinned,
        hang_timeout=config.hang_timeout,
    )
    return NewEvent(event, model=name)


def _discovered(d: Desired) -> NewEvent:
    size = sum(f.size for f in d.files)
    event = ev.ModelDiscovered(source=d.source, path=d.path or "", files=d.files, size=size)
    return NewEvent(event, model=d.name)


def _removed(model: ModelState) -> NewEvent:
    paths = tuple(f.local_path for f in model.files)
    return NewEvent(ev.ModelRemoved(files=paths), model=model.name)


def _files_differ(current: ModelState | None, d: Desired) -> bool:
    if not d.files:
        return False  # nothing on disk yet (an hf-repo preset): whatever a download brought stays
    return current is None or not current.available or current.path != d.path or current.source != d.source


def _kept_download(model: ModelState, present: frozenset[str]) -> bool:
    """Downloaded by us (no source names it) and still on disk, or still downloading."""
    if model.active_job is not None:
        return True
    return model.source == "cache" and model.available and model.path in present and model.last_job is not None


def _from_a_source(model: ModelState) -> bool:
    """A model the catalogue manages: one with files or an hf-repo to fetch. A failed
    download that never had files stays listed to explain itself."""
    return model.listed and (model.available or model.config.hf_repo is not None)


def plan_catalogue(
    state: RouterState,
    desired: Mapping[str, Desired],
    base: ModelConfig,
    present: frozenset[str],
    *,
    exclusive: bool = True,
) -> CataloguePlan:
    """The plan that makes the log say what ``desired`` says. ``base`` is the config of a
    model no source names; ``present`` the file paths of the log's models still on disk.
    Not ``exclusive`` (single-model mode): the models ``desired`` does not name are left alone."""
    events: list[NewEvent] = []
    unload: dict[str, str] = {}
    added: list[str] = []
    changed: list[str] = []
    removed: list[str] = []
    for name, d in desired.items():
        current = state.models.get(name)
        moved = _files_differ(current, d)
        gone = current is not None and not d.files and current.available and current.path not in present
        new_config = (current.config if current is not None else ModelConfig()) != d.config
        events += [_discovered(d)] if moved else [_removed(current)] if gone and current is not None else []
        events += [configured(name, d.config)] if new_config else []
        if current is None or not current.listed:
            added.append(name)
        elif moved or gone or new_config:
            changed.append(name)
            if current.instance is not None:
                unload[name] = "reload"
    for name, model in sorted(state.models.items()) if exclusive else ():
        if name in desired or not _from_a_source(model):
            continue
        if _kept_download(model, present):
            if model.config != base:
                events.append(configured(name, base))
                changed.append(name)
                if model.instance is not None:
                    unload[name] = "reload"
            continue
        removed.append(name)
        if model.instance is not None:
            unload[name] = "removed"
        if model.config != ModelConfig():
            events.append(configured(name, ModelConfig()))
        events.append(_removed(model))
    return CataloguePlan(tuple(events), unload, tuple(added), tuple(changed), tuple(removed))
