"""``modelrouter pull``: start a download and follow it on the event stream.

One bar per file. Progress events carry the job's total; the worker fetches
files one after the other in path order (``workers/download/_job.py``), so the bytes
fill the bars in that order. Ctrl-C cancels the job (the partial is kept),
and the next ``pull`` resumes it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)

from service.console.client import Client, CliError, Query
from service.console.format import duration, size

if TYPE_CHECKING:
    from service.core.events import StoredFile
    from service.event_store.codec import WireEvent

HINTS = {
    "not_found": "check the repo name and quant: the Hub has no such file",
    "unauthorized": "a gated or private repo: give the service a token (HF_TOKEN)",
    "network": "the Hub could not be reached; run pull again to resume",
    "disk_full": "free some disk space (`modelrouter rm` an unused model), then pull again to resume",
    "checksum_mismatch": "the bytes did not match the file's sha256; pull again to fetch it afresh",
    "worker_crashed": "the download worker died; pull again to resume",
    "internal": "see the service log; pull again to resume",
}
_OUTCOMES = ("download_finished", "download_failed", "download_cancelled", "download_interrupted")
EXIT_INTERRUPTED = 130  # as a shell reports a command stopped by SIGINT


class FileBars:
    """The bars of one job's files, fed with its events."""

    def __init__(self, progress: Progress, files: list[StoredFile]) -> None:
        self.progress = progress
        self.files = sorted((str(f["path"]), int(f.get("size") or 0)) for f in files)
        self.tasks: list[TaskID] = [progress.add_task(path, total=sz or None) for path, sz in self.files]

    def show(self, bytes_done: int) -> None:
        left = bytes_done
        for task, (_path, sz) in zip(self.tasks, self.files, strict=True):
            done = min(left, sz)
            self.progress.update(task, completed=done)
            left -= done


def _stream_params(model: str, after: int) -> Query:
    return {"model": model, "type": "download_*", "after": after}


def _progress(console: Console) -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        console=console,
    )


def pull(client: Client, console: Console, name: str) -> int:
    """Download ``name`` (``user/repo[:QUANT][@revision]``) with progress bars."""
    progress = _progress(console)
    seen = head = client.head()
    model, job_id = name, None
    try:  # from the POST on: a Ctrl-C at any point after it cancels the job it started
        answer = client.post("/models", {"model": name})
        model, job_id = answer["model"], answer.get("job_id")
        if not job_id:
            console.print(f"{model} is already downloaded ({size(answer.get('total_bytes'))})")
            return 0
        if answer.get("joined"):
            console.print(f"joining the download already running (job {job_id})")
        with progress, client.events(_stream_params(model, head)) as stream:
            bars = FileBars(progress, list(answer.get("files") or []))
            for event in stream:
                seen = int(event["position"])
                data = event["data"]
                if data.get("job_id") != job_id:
                    continue
                if event["type"] == "download_started" and data.get("resumed_bytes"):
                    progress.console.print(
                        f"resuming: {size(data['resumed_bytes'])} of {size(data['total_bytes'])} already on disk"
                    )
                    bars.show(int(data["resumed_bytes"]))
                elif event["type"] == "download_progress":
                    bars.show(int(data["bytes_done"]))
                elif event["type"] == "download_finished":
                    bars.show(int(data["bytes_total"]))
                if event["type"] in _OUTCOMES:
                    progress.stop()
                    return _report(console, model, event)
    except KeyboardInterrupt:
        progress.stop()
        if job_id is None:
            return EXIT_INTERRUPTED  # before the service answered: no job of ours to cancel
        return _cancel(client, console, model, job_id, seen)
    raise CliError("the event stream ended before the download did; run pull again to resume")


def _report(console: Console, model: str, event: WireEvent) -> int:
    data = event["data"]
    kind = event["type"]
    if kind == "download_finished":
        took = duration(float(data.get("duration_ms") or 0) / 1000)
        console.print(f"[green]✓[/] {model}: {size(data['bytes_total'])} downloaded in {took}")
        return 0
    if kind == "download_cancelled":
        kept = "partial discarded" if data.get("discarded") else f"{size(data['bytes_on_disk'])} kept"
        raise CliError(f"download cancelled ({kept}); run `modelrouter pull {model}` again to resume")
    if kind == "download_interrupted":
        raise CliError(f"download interrupted ({data.get('reason')}): the service resumes it when it restarts")
    reason = str(data.get("reason") or "internal")
    hint = HINTS.get(reason, HINTS["internal"])
    raise CliError(f"download failed: {reason}: {data.get('message')} (hint: {hint})")


def _cancel(client: Client, console: Console, model: str, job_id: str, after: int) -> int:
    """Ctrl-C: cancel the job, wait for the worker to say what it kept."""
    console.print("cancelling the download…")
    client.request("DELETE", f"/downloads/{job_id}")
    try:
        with client.events(_stream_params(model, after)) as stream:
            for event in stream:
                if event["data"].get("job_id") == job_id and event["type"] in _OUTCOMES:
                    data = event["data"]
                    if event["type"] != "download_cancelled":
                        return _report(console, model, event)
                    console.print(
                        f"cancelled: {size(data['bytes_on_disk'])} kept; run `modelrouter pull {model}` again to resume"
                    )
                    return EXIT_INTERRUPTED
    except KeyboardInterrupt:
        pass  # a second Ctrl-C: the cancel is on its way, stop waiting for it
    return EXIT_INTERRUPTED
