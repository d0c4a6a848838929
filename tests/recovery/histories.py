"""A realistic event history for the recovery tests."""

from __future__ import annotations

import hashlib
from pathlib import Path

from service.core import events as ev
from service.event_store.codec import NewEvent
from service.event_store.sync_store import SyncEventStore

MODEL = "org/a-GGUF:Q4_K_M"
OTHER = "org/b-GGUF:Q8_0"
CONTENT = b"hello"
"""What the downloaded model file holds (see ``publish_files``)."""


def publish_files(blob_dir: Path) -> None:
    """Create the blob and its snapshot symlink that ``history(blob_dir)`` records."""
    blob_dir.mkdir(parents=True, exist_ok=True)
    (blob_dir / "blob").write_bytes(CONTENT)
    (blob_dir / "a-Q4_K_M.gguf").symlink_to(blob_dir / "blob")


DEVICES = (
    {"name": "CPU", "description": "Xeon", "type": "cpu", "backend": "CPU", "total_bytes": 64, "free_bytes": 60},
    {"name": "CUDA0", "description": "RTX", "type": "gpu", "backend": "CUDA", "total_bytes": 24, "free_bytes": 23},
)


def history(blob_dir: Path | None = None, progress: int = 40) -> list[NewEvent]:
    """Two models through discovery, configuration, a download with progress,
    loads, a crash and a request, and the devices: every part of the state gets a value."""
    sha = hashlib.sha256(CONTENT).hexdigest()
    files: tuple[dict[str, object], ...] = ({"path": "a-Q4_K_M.gguf", "size": len(CONTENT), "sha256": sha},)
    if blob_dir is not None:
        files = ({**files[0], "blob_path": str(blob_dir / "blob"), "snapshot_path": str(blob_dir / "a-Q4_K_M.gguf")},)
    items: list[NewEvent] = [
        NewEvent(ev.RouterStarted(pid=10, version="0.1", host="127.0.0.1", port=8080)),
        NewEvent(ev.NodeDevicesMeasured(devices=DEVICES, gpu_offload=True, backends=("CPU", "CUDA"))),
        NewEvent(
            ev.ModelDiscovered(source="models_dir", path="/m/b.gguf", files=({"path": "b.gguf", "size": 9},), size=9),
            OTHER,
        ),
        NewEvent(ev.ModelConfigured(aliases=("fast",), params={"ctx": 2048}, ttl_seconds=60.0), OTHER),
        NewEvent(
            ev.DownloadRequested(
                job_id="job-1", repo="org/a-GGUF", commit="c" * 40, quant="Q4_K_M", files=files, total_bytes=5
            ),
            MODEL,
        ),
        NewEvent(ev.DownloadStarted(job_id="job-1", pid=11, commit="c" * 40, files=files, total_bytes=5), MODEL),
    ]
    items += [
        NewEvent(ev.DownloadProgress(job_id="job-1", bytes_done=i, bytes_total=5, bytes_per_second=1.0 * i), MODEL)
        for i in range(progress)
    ]
    items += [
        NewEvent(
            ev.DownloadFinished(
                job_id="job-1", commit="c" * 40, files=files, bytes_total=5, bytes_transferred=5, duration_ms=7.5
            ),
            MODEL,
        ),
        NewEvent(ev.InstanceRequested(instance_id="i-1", port=9001, params={"ctx": 4096}), MODEL),
        NewEvent(ev.InstanceLoading(instance_id="i-1", pid=12, endpoint="http://127.0.0.1:9001"), MODEL),
        NewEvent(ev.LoadingProgress(instance_id="i-1", progress=0.5), MODEL),
        NewEvent(
            ev.InstanceReady(
                instance_id="i-1",
                pid=12,
                endpoint="http://127.0.0.1:9001",
                load_ms=3.5,
                n_ctx=4096,
                n_params=1000,
                file_size=len(CONTENT),
                architecture="llama",
            ),
            MODEL,
        ),
        NewEvent(
            ev.RequestCompleted(instance_id="i-1", route="/v1/chat/completions", status_code=200, duration_ms=4.0),
            MODEL,
        ),
        NewEvent(ev.InstanceRequested(instance_id="i-2", port=9002), OTHER),
        NewEvent(ev.InstanceCrashed(instance_id="i-2", exit_code=None, signal=9, stderr_tail="boom"), OTHER),
        NewEvent(ev.PartialFileFound(path="/tmp/x.incomplete", bytes=3)),
    ]
    return items


def write_history(db_path: Path | str, items: list[NewEvent], *, batch: int = 7) -> SyncEventStore:
    """Append ``items`` in small batches (so recorded_at values repeat and vary)."""
    store = SyncEventStore(db_path, source={"kind": "test"}, synchronous="NORMAL")
    for start in range(0, len(items), batch):
        store.append(items[start : start + batch])
    return store
