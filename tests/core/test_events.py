"""The event classes as a boundary: writers must state required fields and may not
invent keys; readers of stored payloads tolerate both (old and newer logs)."""

from __future__ import annotations

import dataclasses

import pytest

from service.core import events as ev
from service.core.errors import InvalidEvent, UnknownEventType
from service.core.upcasting import decode
from service.event_store.codec import new_event

IDENTITIES = {"job_id", "instance_id", "pid", "port", "endpoint", "path"}
NOT_AN_IDENTITY = {"prompt_cache_discarded.instance_id"}
"""Who found the file, not whose event it is: None when the service deleted it (the budget, a removal)."""


class TestRequiredFields:
    def test_no_field_defaults_to_a_placeholder_empty_string(self) -> None:
        placeholders = [
            f"{cls.TYPE}.{f.name}"
            for cls in ev.EVENT_TYPES.values()
            for f in dataclasses.fields(cls)
            if f.default == ""
        ]
        assert placeholders == []

    def test_identities_are_required_wherever_they_appear(self) -> None:
        optional = [
            f"{cls.TYPE}.{f.name}"
            for cls in ev.EVENT_TYPES.values()
            for f in dataclasses.fields(cls)
            if f.name in IDENTITIES
            and f.name not in ev.required_fields(cls)
            and f"{cls.TYPE}.{f.name}" not in NOT_AN_IDENTITY
        ]
        assert optional == []

    def test_fields_are_keyword_only(self) -> None:
        """Required fields follow defaulted ones without reordering the stored payload."""
        with pytest.raises(TypeError):
            ev.DownloadCancelRequested("j")  # type: ignore[misc]  # positional on purpose
        assert [f.name for f in dataclasses.fields(ev.DownloadRequested)][:3] == ["job_id", "repo", "revision"]


class TestWriting:
    def test_from_data_refuses_unknown_keys_and_missing_required_fields(self) -> None:
        with pytest.raises(InvalidEvent) as refused:
            ev.DownloadProgress.from_data({"job_id": "j", "bytes_don": 1, "bytes_total": 2})
        assert refused.value.unknown == ["bytes_don"] and refused.value.missing == ["bytes_done"]
        assert "unknown fields bytes_don; missing required fields bytes_done" in str(refused.value)

    def test_from_data_builds_the_event_and_freezes_lists(self) -> None:
        built = ev.ModelRemoved.from_data({"files": ["/m/a.gguf"]})
        assert built == ev.ModelRemoved(files=("/m/a.gguf",)) and built.bytes_freed == 0

    def test_new_event_is_as_strict(self) -> None:
        with pytest.raises(InvalidEvent, match="missing required fields port"):
            new_event("instance_requested", {"instance_id": "i"})
        with pytest.raises(UnknownEventType):
            new_event("instance_teleported", {"instance_id": "i"})


class TestReading:
    def test_a_stored_payload_with_unknown_keys_still_reads(self) -> None:
        """Written by a newer modelrouter that added a field: older code ignores it."""
        data = {"job_id": "j", "discard": True, "added_later": 1}
        assert decode("download_cancel_requested", 1, data) == ev.DownloadCancelRequested(job_id="j", discard=True)

    def test_a_missing_required_field_reads_as_the_zero_it_defaulted_to(self) -> None:
        assert decode("router_started", 1, {"pid": 3}) == ev.RouterStarted(pid=3, version="", host="", port=0)
        assert decode("model_discovered", 1, {"files": [{"path": "x"}]}) == ev.ModelDiscovered(
            path="", files=({"path": "x"},), size=0
        )
