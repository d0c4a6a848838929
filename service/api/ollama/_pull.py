"""``POST /api/pull``: a real download job (the one ``POST /models`` and ``modelrouter pull``
start), its progress in Ollama's NDJSON shape.

The name is resolved on the Hub before anything is streamed, so an unknown repo or quant is a
404 with Ollama's ``{"error"}`` body rather than a line inside a 200. The stream follows the job
in the fold; a client that hangs up only stops its stream: the job goes on (cancel it with
``DELETE /downloads/{id}``, which Ollama users ask for, ollama#13142), and a second pull of the
same model joins it.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from litestar import Response, post
from litestar.openapi.datastructures import ResponseSpec
from litestar.response import Stream
from litestar.status_codes import HTTP_200_OK

import service.api.ollama._schemas as o
from service.api.controllers import start_download
from service.api.ollama._errors import error_line, ollama_errors
from service.api.problems import Problem
from service.api.schemas import DownloadAnswer
from service.api.scopes import require_model
from service.core.keys import Principal
from service.core.ollama import model_name, pull_status
from service.core.state import DownloadJob, JobStatus, RouterState
from service.event_store.live_state import LiveState
from service.settings import Settings
from service.supervision.downloads import DownloadSupervisor

NDJSON = "application/x-ndjson"
_TAIL = ("verifying sha256 digest", "writing manifest", "success")
_ENDED = (JobStatus.FINISHED, JobStatus.FAILED, JobStatus.CANCELLED, JobStatus.INTERRUPTED)
_POLL = 1.0  # seconds between progress lines while the job makes none (a stall still shows)
_FOREVER = 30 * 86400.0  # `stream: false` waits for the job however long it takes (the client may hang up)


def _line(data: dict[str, object]) -> bytes:
    return json.dumps(data).encode() + b"\n"


def _file_lines(answer: DownloadAnswer, job: DownloadJob | None) -> list[dict[str, object]]:
    """One ``pulling <digest>`` line per file; the job's byte count is spread over its files in
    order, as the worker fetches them one after the other."""
    done = job.bytes_done if job is not None else answer.total_bytes
    lines = []
    for f in answer.files:
        digest = f"sha256:{f.sha256}" if f.sha256 else f"sha256:{f.path}"
        got = max(0, min(f.size, done))
        done -= got
        line = pull_status(DownloadJob(job_id="", model=answer.model, bytes_total=f.size, bytes_done=got), digest)
        lines.append(line)
    return lines


def _failure(job: DownloadJob) -> str:
    if job.status is JobStatus.CANCELLED:
        return f"download of {job.model!r} was cancelled"
    if job.error is not None:
        return job.error.message
    return f"download of {job.model!r} ended: {job.status.value}"


async def _until_changed(live: LiveState, job_id: str, seen: tuple[int, JobStatus]) -> DownloadJob:
    def changed(state: RouterState) -> bool:
        job = state.job(job_id)
        return job is None or (job.bytes_done, job.status) != seen

    state = await live.wait_until(changed, _POLL) or live.state
    job = state.job(job_id)
    assert job is not None  # jobs are never forgotten by the fold
    return job


async def _progress(answer: DownloadAnswer, live: LiveState) -> AsyncIterator[bytes]:
    yield _line({"status": "pulling manifest"})
    if answer.job_id is None:  # already on disk
        for line in _file_lines(answer, None):
            yield _line(line)
    else:
        job = live.state.job(answer.job_id)
        while job is not None:
            for line in _file_lines(answer, job):
                yield _line(line)
            if job.status in _ENDED:
                break
            job = await _until_changed(live, answer.job_id, (job.bytes_done, job.status))
        if job is not None and job.status is not JobStatus.FINISHED:
            yield error_line(_failure(job))
            return
    for status in _TAIL:
        yield _line({"status": status})


async def _wait_finished(answer: DownloadAnswer, live: LiveState) -> None:
    if answer.job_id is None:
        return
    job_id = answer.job_id

    def ended(state: RouterState) -> bool:
        job = state.job(job_id)
        return job is None or job.status in _ENDED

    state = await live.wait_until(ended, _FOREVER) or live.state
    job = state.job(job_id)
    if job is not None and job.status is not JobStatus.FINISHED:
        status = 409 if job.status is JobStatus.CANCELLED else 424
        raise Problem(status, "download_failed", _failure(job))


@post(
    "/pull",
    operation_id="ollamaPull",
    tags=["ollama"],
    status_code=HTTP_200_OK,
    responses={
        200: ResponseSpec(
            data_container=o.ProgressLine,
            description=f"`stream: false`: one `success`; else {NDJSON} progress lines, the last `success`",
            generate_examples=False,
        ),
        **ollama_errors(400, 401, 403, 404, 409, 424, 503, 507),
    },
)
async def pull(
    data: o.ModelBody, settings: Settings, live: LiveState, downloads: DownloadSupervisor, caller: Principal
) -> Response[Any]:
    """Download ``hf.co/user/repo:QUANT`` (or ``huggingface.co/...``, or ``user/repo:QUANT``) from the Hub."""
    require_model(caller, live.state, model_name(data.named()), "/api/pull")
    answer = await start_download(model_name(data.named()), settings, live, downloads)
    if not data.stream:
        await _wait_finished(answer, live)
        return Response(o.ProgressLine(status="success"))
    return Stream(_progress(answer, live), media_type=NDJSON, headers={"cache-control": "no-cache"})
