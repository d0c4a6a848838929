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
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote, urlencode

import httpx
import msgspec
from litestar import Request, get
from litestar.params import Parameter

from service.api.controllers._downloads import JobId
from service.api.problems import Problem
from service.api.proxy import Forwarding
from service.api.schemas import WorkerLogView, problems
from service.cluster.forwarding import forward_headers
from service.cluster.node_client import NodeResponse
from service.event_store.live_state import LiveState
from service.settings import Settings
from service.supervision.log_files import tail_lines
from service.supervision.worker_logs import WorkerLogs

NodeAnswer = NodeResponse | httpx.Response  # another node's answer: plain HTTP (NodeClient), or TLS (httpx)
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


def ran_elsewhere(node: str | None, settings: Settings) -> str | None:
    """``node`` (the one that ran a worker) when it is not this one: the worker's log is on its disk."""
    return node if node is not None and node != settings.node else None


async def ask_node(
    fwd: Forwarding,
    request: Request[Any, Any, Any],
    node: str,
    path: str,
    params: Mapping[str, Any],  # free-form: the query string passed on to the node as it came
    kept: Sequence[str] = (),
) -> NodeAnswer:
    """``GET path`` of ``node`` (the one that ran the worker, whose disk holds its log), the caller's
    key and ``kept`` headers passed on (every node of a cluster has the same keys): its answer, its body
    still to read, or the problem saying why there is none. A key given as ``?api_key=`` (a stream's)
    goes on as a header."""
    member = fwd.live.state.nodes.get(node)
    if member is None or not member.url:
        raise Problem(404, "log_not_found", f"the log is on node {node!r}, which this node does not know")
    headers = forward_headers(request.headers, kept, node)
    key = request.query_params.get("api_key")
    if key and not any(name.lower() in ("authorization", "x-api-key") for name in headers):
        headers["authorization"] = f"Bearer {key}"
    url = f"{member.url.rstrip('/')}{path}?{urlencode(params)}"
    try:
        if fwd.nodes.handles(url):
            answer: NodeAnswer = await fwd.nodes.send("GET", url, headers, b"")
        else:  # a TLS node: through httpx
            answer = await fwd.http.send(fwd.http.build_request("GET", url, headers=headers), stream=True)
        if answer.status_code == 200:
            return answer
        try:
            raw = await answer.aread()
        finally:
            await answer.aclose()
    except httpx.HTTPError as exc:
        raise Problem(503, "node_unreachable", f"node {node!r}, which holds the log, did not answer: {exc}") from None
    raise _node_problem(node, answer.status_code, raw)


def _node_problem(node: str, status: int, raw: bytes) -> Problem:
    """``node``'s refusal as this node's problem (its type and detail, the node named)."""
    try:
        body = json.loads(raw)
    except ValueError:
        body = None
    detail = body.get("detail") if isinstance(body, dict) else None
    code = str(body.get("type", "")).rsplit("/", 1)[-1] if isinstance(body, dict) else ""
    text = detail or raw[:200].decode("utf-8", "replace")
    return Problem(status if status >= 400 else 502, code or "node_error", f"node {node!r}: {text}", node=node)


async def remote_log(
    fwd: Forwarding,
    request: Request[Any, Any, Any],
    node: str,
    path: str,
    params: dict[str, Any],  # free-form: the query string passed on to the node as it came
) -> WorkerLogView:
    """The answer of ``node`` (the one that ran the worker) to ``path``: the end of its log."""
    answer = await ask_node(fwd, request, node, path, params)
    try:
        raw = await answer.aread()
    except httpx.HTTPError as exc:
        raise Problem(503, "node_unreachable", f"node {node!r}, which holds the log, did not answer: {exc}") from None
    finally:
        await answer.aclose()
    try:
        return msgspec.json.decode(raw, type=WorkerLogView)
    except msgspec.DecodeError:
        raise _node_problem(node, 502, raw) from None


@get(
    "/downloads/{job_id:str}/logs",
    operation_id="downloadLogs",
    summary="The end of a download job's worker log",
    tags=["downloads"],
    responses=problems(400, 404),
)
async def download_logs(  # the pieces, then the query parameter
    job_id: JobId,
    live: LiveState,
    worker_logs: WorkerLogs | None,
    request: Request[Any, Any, Any],
    forwarding: Forwarding,
    settings: Settings,
    tail: Tail = DEFAULT_TAIL,
) -> WorkerLogView:
    """The last ``tail`` lines the job's download worker wrote: what it resolved, where it
    resumed, each retry and how it ended (docs/operations.md). In a cluster, the node that runs
    (or last ran) the job answers: its disk holds the log."""
    job = live.state.job(job_id)
    if job is None:
        raise Problem(404, "job_not_found", f"download job {job_id!r} does not exist")
    node = ran_elsewhere(job.node, settings)
    if node is not None:
        return await remote_log(forwarding, request, node, f"/downloads/{quote(job_id)}/logs", {"tail": tail})
    path = kept_log(worker_logs, "download", job_id)
    return WorkerLogView(log_path=str(path), lines=await _tail(path, tail), model=job.model, job_id=job_id)
