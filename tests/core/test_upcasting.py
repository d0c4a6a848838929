"""Upcasters lift old payloads and refuse what this code cannot read."""

from __future__ import annotations

import pytest

from service.core.errors import UnknownEventType, UnknownSchemaVersion
from service.core.events import DownloadProgress
from service.core.upcasting import decode, upcast


def test_v1_progress_is_renamed_and_gains_rate_fields() -> None:
    assert upcast("download_progress", 1, {"job_id": "j", "done": 1, "total": 2}) == {
        "job_id": "j",
        "bytes_done": 1,
        "bytes_total": 2,
        "bytes_per_second": None,
        "eta_seconds": None,
    }


def test_current_version_passes_through_unchanged() -> None:
    data = {"job_id": "j", "bytes_done": 5, "bytes_total": 9, "bytes_per_second": 1.5, "eta_seconds": 2.0}
    assert decode("download_progress", DownloadProgress.VERSION, data) == DownloadProgress(**data)


def test_future_version_fails_loudly() -> None:
    with pytest.raises(UnknownSchemaVersion):
        upcast("download_progress", DownloadProgress.VERSION + 1, {})


def test_unknown_type_fails_loudly() -> None:
    with pytest.raises(UnknownEventType):
        decode("model_teleported", 1, {})
