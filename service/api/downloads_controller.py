"""Download endpoints: llama.cpp's ``POST /models`` plus job views and cancel."""

from __future__ import annotations

import asyncio
from typing import Any

from litestar import Request, delete, get, post
from litestar.status_codes import HTTP_200_OK

from service.api.problems import Problem
from service.api.request_body import flag, json_body, model_field
from service.api.views import job_view
from service.downloads.resolution import ResolutionError, resolve
from service.runtime import Runtime


@post("/models", operation_id="downloadModel", tags=["downloads"], status_code=HTTP_200_OK)
async def download_model(request: Request[Any, Any, Any], runtime: Runtime) -> dict[str, Any]:
    """Resolve ``user/repo[:QUANT][@revision]`` on the Hub, then start a download
    job in its own worker process (or join the running one). Returns at once."""
    name = model_field(await json_body(request))
    settings = runtime.settings
    try:
        resolution = await asyncio.to_thread(resolve, name, endpoint=settings.hf_endpoint, token=settings.hf_token)
    except ResolutionError as exc:
        raise Problem(exc.status, exc.code, exc.message, **exc.extra) from None
    model = resolution.canonical_name
    job_id, joined, already = await runtime.downloads.request(model, resolution.to_spec())
    job = runtime.live.state.job(job_id) if job_id else None
    return {
        "success": True,
        "model": model,
        "job_id": job_id,
        "joined": joined,
        "already_downloaded": already,
        "status": job.status.value if job else "downloaded",
        "files": [{"path": f.path, "size": f.size, "sha256": f.sha256} for f in resolution.files],
        "total_bytes": resolution.total_bytes,
    }


@get("/downloads", operation_id="listDownloads", tags=["downloads"])
async def list_downloads(runtime: Runtime) -> dict[str, Any]:
    """Every download job in the log, oldest first."""
    return {"downloads": [job_view(job) for job in runtime.live.state.all_jobs()]}


@get("/downloads/{job_id:str}", operation_id="getDownload", tags=["downloads"])
async def get_download(job_id: str, runtime: Runtime) -> dict[str, Any]:
    job = runtime.live.state.job(job_id)
    if job is None:
        raise Problem(404, "job_not_found", f"download job {job_id!r} does not exist")
    return job_view(job)


@delete("/downloads/{job_id:str}", operation_id="cancelDownload", tags=["downloads"], status_code=HTTP_200_OK)
async def cancel_download(job_id: str, runtime: Runtime, discard: str | None = None) -> dict[str, Any]:
    """Cancel a running job. The partial file is kept for a later resume unless
    ``?discard=true``."""
    job = await runtime.downloads.cancel(job_id, discard=flag(discard, "discard"))
    return job_view(job)
