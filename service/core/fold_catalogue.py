"""The fold's handlers of router and model-catalogue events (see :mod:`service.core.fold`)."""

from __future__ import annotations

import service.core.events as ev
from service.core.fold_support import (
    ensure_model,
    model_of,
    on,
    put_model,
)
from service.core.state import (
    ModelConfig,
    RouterState,
    evolve,
)

# --- router ------------------------------------------------------------------


@on(ev.RouterStarted)
def _router_started(state: RouterState, rec: ev.Recorded) -> RouterState:
    e = rec.event
    assert isinstance(e, ev.RouterStarted)
    return evolve(state, router_pid=e.pid, router_started_at=rec.recorded_at)


@on(ev.PartialFileFound)
def _partial_found(state: RouterState, rec: ev.Recorded) -> RouterState:
    e = rec.event
    assert isinstance(e, ev.PartialFileFound)
    return evolve(state, partial_files={**state.partial_files, e.path: e.bytes})


@on(ev.PartialFileRemoved)
def _partial_removed(state: RouterState, rec: ev.Recorded) -> RouterState:
    e = rec.event
    assert isinstance(e, ev.PartialFileRemoved)
    remaining = {path: size for path, size in state.partial_files.items() if path != e.path}
    return evolve(state, partial_files=remaining)


# --- catalogue ---------------------------------------------------------------


@on(ev.ModelDiscovered)
def _discovered(state: RouterState, rec: ev.Recorded) -> RouterState:
    e = rec.event
    assert isinstance(e, ev.ModelDiscovered)
    model = ensure_model(state, rec, source=e.source)
    if model is None:
        return state
    return put_model(state, model.replace(source=e.source, available=True, files=e.files, path=e.path, size=e.size))


@on(ev.ModelConfigured)
def _configured(state: RouterState, rec: ev.Recorded) -> RouterState:
    e = rec.event
    assert isinstance(e, ev.ModelConfigured)
    config = ModelConfig(
        aliases=tuple(e.aliases),
        params=dict(e.params),
        ttl_seconds=e.ttl_seconds,
        restart=e.restart,
        load_on_startup=e.load_on_startup,
        args=dict(e.args),
        ignored=tuple(e.ignored),
        hf_repo=e.hf_repo,
        hf_file=e.hf_file,
        stop_timeout=e.stop_timeout,
        hidden=e.hidden,
        sleep_idle_seconds=e.sleep_idle_seconds,
        pinned=e.pinned,
        hang_timeout=e.hang_timeout,
    )
    model = ensure_model(state, rec)
    return state if model is None else put_model(state, model.replace(config=config))


@on(ev.ModelRemoved)
def _removed(state: RouterState, rec: ev.Recorded) -> RouterState:
    model = model_of(state, rec)
    if model is None:
        return state
    if model.instance is not None:
        # Removal stops the instance first; dropping a live one here would leave
        # its worker untracked (the phantom instances of issue 11 §1.2).
        return evolve(
            state,
            anomalies=state.anomalies + 1,
            last_anomaly=f"#{rec.position}: model_removed for {model.name!r} with a live instance",
        )
    # Its files are gone, and so are the names Ollama's copy gave it (a copy has no files of its own).
    gone = model.replace(
        available=False, files=(), path=None, size=0, failed=False, asleep_since=None, added_aliases=(), prompt_cache={}
    )
    return put_model(state, gone)


@on(ev.ModelAliased)
def _aliased(state: RouterState, rec: ev.Recorded) -> RouterState:
    e = rec.event
    assert isinstance(e, ev.ModelAliased)
    model = model_of(state, rec)
    if model is None or e.alias in model.added_aliases:
        return state
    return put_model(state, model.replace(added_aliases=(*model.added_aliases, e.alias)))


@on(ev.ModelAliasRemoved)
def _alias_removed(state: RouterState, rec: ev.Recorded) -> RouterState:
    e = rec.event
    assert isinstance(e, ev.ModelAliasRemoved)
    model = model_of(state, rec)
    if model is None or e.alias not in model.added_aliases:
        return state
    return put_model(state, model.replace(added_aliases=tuple(a for a in model.added_aliases if a != e.alias)))
