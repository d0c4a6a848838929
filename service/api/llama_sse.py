"""``GET /models/sse`` in llama.cpp router mode's shape, for its existing clients.

llama.cpp sends ``data: {"model", "event", "data"}`` with no ``event:`` or
``id:`` field and no replay. We send the same data lines, mapped from our
events by :func:`to_llama` (``models_reloaded`` is its ``{"model": "*",
"event": "models_reload"}``), plus ``id:`` (so a reconnect can resume from
``Last-Event-ID``) and ``download_cancelled``, which its reviewers asked for.
"""

from __future__ import annotations

from typing import TypedDict

from service.core import events as ev

SseData = dict[str, object]
"""An event's ``data`` on llama.cpp's ``/models/sse``: its shape is the event's (``status``, ``progress``...)."""


class LlamaModelEvent(TypedDict, total=False):
    """One llama.cpp ``/models/sse`` payload (``models_reload`` has no ``data``)."""

    model: str | None
    event: str
    data: SseData


_ENDED = {
    ev.InstanceStopped: "unloaded",
    ev.InstanceLost: "unloaded",
    ev.InstanceCrashed: "unloaded",
    ev.InstanceLoadFailed: "unloaded",
}


def _status(recorded: ev.Recorded) -> tuple[str, SseData] | None:
    e = recorded.event
    if isinstance(e, ev.InstanceRequested):
        return "model_status", {"status": "loading"}
    if isinstance(e, ev.DownloadRequested):
        return "model_status", {"status": "downloading"}
    if isinstance(e, ev.LoadingProgress):
        return "status_change", {
            "status": "loading",
            "progress": {"stages": ["text_model"], "current": 0, "value": e.progress},
        }
    if isinstance(e, ev.InstanceReady):
        info = {"n_ctx": e.n_ctx, "n_params": e.n_params, "architecture": e.architecture, "load_ms": e.load_ms}
        return "status_change", {"status": "loaded", "info": info}
    if type(e) in _ENDED:
        exit_code = getattr(e, "exit_code", None)
        failed = isinstance(e, (ev.InstanceCrashed, ev.InstanceLoadFailed))
        return "status_change", {"status": "unloaded", "exit_code": exit_code if exit_code is not None else int(failed)}
    return None


def to_llama(recorded: ev.Recorded) -> LlamaModelEvent | None:
    """The llama.cpp ``/models/sse`` payload for one of our events, or None when
    llama.cpp has no such event."""
    e = recorded.event
    mapped = _status(recorded)
    if mapped is None:
        if isinstance(e, ev.DownloadProgress):
            mapped = "download_progress", {"progress": {e.job_id: {"done": e.bytes_done, "total": e.bytes_total}}}
        elif isinstance(e, (ev.DownloadFinished, ev.DownloadFailed, ev.DownloadCancelled)):
            mapped = e.TYPE, {}
        elif isinstance(e, ev.ModelRemoved):
            mapped = "model_remove", {}
        elif isinstance(e, ev.ModelsReloaded):
            return {"model": "*", "event": "models_reload"}  # llama.cpp sends it without data
        else:
            return None
    event, data = mapped
    return {"model": recorded.model, "event": event, "data": data}
