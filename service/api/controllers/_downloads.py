"""Download endpoints: llama.cpp's ``POST /models`` plus job views and cancel."""

from __future__ import annotations

import asyncio
from typing import Annotated

from litestar import delete, get, post
from litestar.params import Parameter
from litestar.status_codes import HTTP_200_OK

from service.api.problems import Problem
from service.api.schemas import DownloadAnswer, FileView, JobList, JobView, ModelCommand, problems
from service.api.scopes import require_model
from service.api.views import job_view
from service.core import cluster
from service.core.cache_layout import CachePaths
from service.core.disk_budget import check_disk
from service.core.keys import Principal
from service.core.state import RouterState
from service.downloads.cache_files import free_bytes, partial_bytes
from service.downloads.resolution import Resolution, ResolutionError, resolve
from service.event_store.live_state import LiveState
from service.settings import Settings
from service.supervision.downloads import DownloadSupervisor

JobId = Annotated[str, Parameter(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.\-]+$")]


@post(
    "/models",
    operation_id="downloadModel",
    tags=["downloads"],
    status_code=HTTP_200_OK,
    responses=problems(400, 401, 403, 404, 413, 422, 424, 503, 507),
)
async def download_model(
    data: ModelCommand, settings: Settings, live: LiveState, downloads: DownloadSupervisor, caller: Principal
) -> DownloadAnswer:
    """Resolve ``user/repo[:QUANT][@revision]`` on the Hub, then start a download
    job in its own worker process (or join the running one). Returns at once.
    Refused with 507 when it would leave less than the disk reserve free. In a cluster the job goes
    to the node with the most free room for the files (``download_requested`` with ``node``)."""
    require_model(caller, live.state, data.model.strip(), "/models")
    return await start_download(data.model, settings, live, downloads)


async def start_download(
    name: str, settings: Settings, live: LiveState, downloads: DownloadSupervisor
) -> DownloadAnswer:
    """``POST /models``'s work, shared with Ollama's ``/api/pull`` so both start the same job."""
    try:
        resolution = await asyncio.to_thread(resolve, name, endpoint=settings.hf_endpoint, token=settings.hf_token)
    except ResolutionError as exc:
        raise Problem(exc.status, exc.code, exc.message, **exc.extra) from None
    model = resolution.canonical_name
    size = resolution.total_bytes
    elsewhere = cluster.pull_site(live.state, settings.node, size) is not None
    if not elsewhere:
        await _check_disk(settings, live, model, resolution)  # else the node with more room checks its own

    def site(state: RouterState) -> str | None:  # in a cluster, the node with the most room for it
        # A job checked here stays here; one meant elsewhere is placed on the state it lands on.
        return cluster.pull_site(state, settings.node, size) if elsewhere else None

    job_id, joined, already = await downloads.request(model, resolution.to_spec(), site)
    job = live.state.job(job_id) if job_id else None
    return DownloadAnswer(
        success=True,
        model=model,
        job_id=job_id,
        joined=joined,
        already_downloaded=already,
        status=job.status.value if job else "downloaded",
        files=[FileView(path=f.path, size=f.size, sha256=f.sha256) for f in resolution.files],
        total_bytes=resolution.total_bytes,
    )


async def _check_disk(settings: Settings, live: LiveState, model: str, resolution: Resolution) -> None:
    cache_dir = settings.cache_dir
    paths = CachePaths(cache_dir, resolution.repo)
    shas = [f.sha256 for f in resolution.files if f.sha256]
    on_disk = await asyncio.to_thread(partial_bytes, paths, shas)
    free = await asyncio.to_thread(free_bytes, cache_dir)
    shortfall = check_disk(
        live.state,
        model,
        total_bytes=resolution.total_bytes,
        on_disk=on_disk,
        free=free,
        reserve=settings.disk_reserve_bytes,
    )
    if shortfall is not None:
        raise Problem(
            507,
            "disk_full",
            shortfall.message,
            model=model,
            needed_bytes=shortfall.needed,
            pending_bytes=shortfall.pending,
            free_bytes=shortfall.free,
            reserve_bytes=shortfall.reserve,
        )


@get("/downloads", operation_id="listDownloads", tags=["downloads"], responses=problems(400))
async def list_downloads(live: LiveState) -> JobList:
    """Every download job in the log, oldest first."""
    return JobList(downloads=[job_view(job) for job in live.state.all_jobs()])


@get("/downloads/{job_id:str}", operation_id="getDownload", tags=["downloads"], responses=problems(400, 404))
async def get_download(job_id: JobId, live: LiveState) -> JobView:
    """One download job: bytes, rate, ETA, outcome."""
    job = live.state.job(job_id)
    if job is None:
        raise Problem(404, "job_not_found", f"download job {job_id!r} does not exist")
    return job_view(job)


@delete(
    "/downloads/{job_id:str}",
    operation_id="cancelDownload",
    tags=["downloads"],
    status_code=HTTP_200_OK,
    responses=problems(400, 403, 404, 409, 503, 507),
)
async def cancel_download(
    job_id: JobId,
    downloads: DownloadSupervisor,
    live: LiveState,
    caller: Principal,
    discard: Annotated[bool, Parameter(description="Delete the partial file (default: keep it to resume)")] = False,
) -> JobView:
    """Cancel a running job. The partial file is kept for a later resume unless
    ``?discard=true``."""
    job = live.state.job(job_id)
    if job is not None:  # an unknown job: the supervisor's 404
        require_model(caller, live.state, job.model, f"/downloads/{job_id}")
    job = await downloads.cancel(job_id, discard=discard)
    return job_view(job)
