"""``modelrouter unload``, ``rm`` and ``cancel``: one call each, one line of answer."""

from __future__ import annotations

import re

from rich.console import Console

from service.console.client import Client, CliError
from service.console.format import size

_JOB_ID = re.compile(r"^[A-Za-z0-9_.\-]+$")  # as GET /downloads/{job_id} accepts


def unload(client: Client, console: Console, name: str) -> int:
    answer = client.post("/models/unload", {"model": name})
    if answer.get("download"):
        console.print(f"{answer['model']}: download cancelled (it was downloading)")
    else:
        console.print(f"{answer['model']}: unloaded")
    return 0


def rm(client: Client, console: Console, name: str, *, force: bool) -> int:
    answer = client.request("DELETE", "/models", params={"model": name, "force": str(force).lower()})
    console.print(f"{answer['model']}: removed {len(answer['files'])} files, {size(answer['bytes_freed'])} freed")
    return 0


def cancel(client: Client, console: Console, target: str, *, discard: bool) -> int:
    """Cancel a download by model name or job id."""
    job_id = _active_job(client, target)
    if job_id is None:
        if not _JOB_ID.match(target):
            raise CliError(f"{target!r} is neither a listed model nor a download job id")
        job_id = target
    job = client.request("DELETE", f"/downloads/{job_id}", params={"discard": str(discard).lower()})
    kept = "partial discarded" if discard else "partial kept: `modelrouter pull` resumes it"
    console.print(f"{job['model']}: download {job['job_id']} {job['status']} ({kept})")
    return 0


def _active_job(client: Client, name: str) -> str | None:
    for model in client.get("/models")["data"]:
        if name == model["id"] or name in model.get("aliases", []):
            progress = model["status"].get("progress")
            if not progress:
                raise CliError(f"{model['id']} is not downloading")
            return str(progress["job_id"])
    return None
