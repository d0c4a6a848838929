"""The end of a worker's log: ``GET /models/{id}/logs`` (one instance, the latest by default)
and ``GET /downloads/{job_id}/logs`` (one download job).

The files are the ones :mod:`service.supervision.worker_logs` keeps under
``<home>/logs/workers``; they need the same key as every other non-public route
(:mod:`service.api.auth`). ``/models/{id}/logs`` is answered by the handler of
``/models/{id}/history`` (:mod:`._history`): a model id contains ``/`` and
Litestar cannot route a ``path`` parameter followed by a fixed segment.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import httpx
import msgspec
from litestar import Request, get
from litestar.params import Parameter

from service.api.controllers._downloads import JobId
from service.api.problems import Problem
from service.api.proxy import Forwarding
from service.api.schemas import WorkerLogView, problems
from service.cluster.forwarding import forward_headers
from service.live_state import LiveState
from service.supervision.log_files import tail_lines
from service.supervision.worker_logs import WorkerLogs

MAX_TAIL = 10_000
DEFAULT_TAIL = 100
Tail = Annotated[int, Parameter(ge=1, le=MAX_TAIL, description=f"the last N lines (1..{MAX_TAIL})")]
_ID = r"^[A-Za-z0-9_.\-]+$"
InstanceId = Annotated[
    str | None, Parameter(min_length=1, max_length=128, pattern=_ID, description="an instance (default: the latest)")
]


async def _tail(path: Path, tail: int) -> list[str]:
    return await asyncio.to_thread(tail_lines, path, tail)


def chosen_instance(model: str, instances: Sequence[str], instance: str | None) -> str:
    """``instance`` if it is one of the model's ``instances`` (oldest first), else the latest."""
    if instance is not None and instance not in instances:
        raise Problem(404, "instance_not_found", f"model {model!r} has no instance {instance!r}", model=model)
    chosen = instance or (instances[-1] if instances else None)
    if chosen is None:
        raise Problem(404, "log_not_found", f"model {model!r} has never been loaded: it has no worker log", model=model)
    return chosen


async def instance_log(
    model: str, instances: Sequence[str], instance: str | None, tail: int, logs: WorkerLogs | None
) -> WorkerLogView:
    """The log of ``instance`` (one of the model's ``instances``, oldest first; default the latest)."""
    chosen = chosen_instance(model, instances, instance)
    path = kept_log(logs, "instance", chosen)
    return WorkerLogView(log_path=str(path), lines=await _tail(path, tail), model=model, instance_id=chosen)


def kept_log(logs: WorkerLogs | None, kind: str, key: str) -> Path:
    """The file of worker ``kind``/``key``, or the problem saying why there is none on this node."""
    if logs is None:
        raise Problem(503, "logs_unavailable", "this service keeps no worker logs")
    path = logs.path(kind, key)
    if not path.exists() and not path.with_name(path.name + ".1").exists():
        raise Problem(
            404,
            "log_not_found",
            f"the log of {kind} {key!r} is not on this node: deleted to keep the logs' budget, "
            "or written by another node or before the service kept workers' logs",
        )
    return path


async def remote_log(
    fwd: Forwarding, request: Request[Any, Any, Any], node: str, path: str, params: dict[str, Any]
) -> WorkerLogView:
    """The answer of ``node`` (the one that ran the worker, whose disk holds its log) to ``path``,
    the caller's key passed on (every node of a cluster has the same keys)."""
    member = fwd.live.state.nodes.get(node)
    if member is None or not member.url:
        raise Problem(404, "log_not_found", f"the log is on node {node!r}, which this node does not know")
    headers = forward_headers(request.headers, (), node)
    try:
        answer = await fwd.http.get(member.url.rstrip("/") + path, params=params, headers=headers)
    except httpx.HTTPError as exc:
        raise Problem(503, "node_unreachable", f"node {node!r}, which holds the log, did not answer: {exc}") from None
    try:
        body = answer.json()
    except ValueError:
        body = None
    if answer.status_code != 200 or not isinstance(body, dict):
        detail = body.get("detail") if isinstance(body, dict) else None
        code = str(body.get("type", "")).rsplit("/", 1)[-1] if isinstance(body, dict) else ""
        status = answer.status_code if answer.status_code >= 400 else 502
        raise Problem(status, code or "node_error", f"node {node!r}: {detail or answer.text[:200]}", node=node)
    return msgspec.convert(body, WorkerLogView)


@get(
    "/downloads/{job_id:str}/logs",
    operation_id="downloadLogs",
    summary="The end of a download job's worker log",
    tags=["downloads"],
    responses=problems(400, 404),
)
async def download_logs(
    job_id: JobId, live: LiveState, worker_logs: WorkerLogs | None, tail: Tail = DEFAULT_TAIL
) -> WorkerLogView:
    """The last ``tail`` lines the job's download worker wrote: what it resolved, where it
    resumed, each retry and how it ended (docs/operations.md)."""
    job = live.state.job(job_id)
    if job is None:
        raise Problem(404, "job_not_found", f"download job {job_id!r} does not exist")
    path = kept_log(worker_logs, "download", job_id)
    return WorkerLogView(log_path=str(path), lines=await _tail(path, tail), model=job.model, job_id=job_id)
