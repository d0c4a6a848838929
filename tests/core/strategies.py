"""Hypothesis strategies producing plausible (and implausible) event sequences."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

from hypothesis import strategies as st

from service.core import events as ev
from tests.core.examples import EXAMPLE_VALUES

MODELS = ["org/a-GGUF:Q4_K_M", "org/b-GGUF:Q8_0", "local-model"]
JOBS = ["job-1", "job-2", "job-3"]
INSTANCES = ["inst-1", "inst-2", "inst-3"]
FILES = ({"path": "m-Q4_K_M.gguf", "size": 100, "sha256": "ab" * 32},)
_CPU = {"name": "CPU", "description": "cpu", "type": "cpu", "backend": "CPU", "total_bytes": 100, "free_bytes": 90}
_GPU = {"name": "CUDA0", "description": "gpu", "type": "gpu", "backend": "CUDA", "total_bytes": 80, "free_bytes": 8}

_KEY_FIELDS = {
    "job_id": st.sampled_from(JOBS),
    "instance_id": st.sampled_from(INSTANCES),
    "bytes_done": st.integers(0, 100),
    "bytes_total": st.just(100),
    "total_bytes": st.just(100),
    "pid": st.integers(2, 40000),
    "files": st.just(FILES),
    "reason": st.sampled_from(["network", "unload", "idle", "not_gguf", "router_restart"]),
    "exit_code": st.one_of(st.none(), st.integers(-9, 3)),
    "signal": st.one_of(st.none(), st.just(9)),
    "progress": st.floats(0, 1),
    "alias": st.sampled_from(["fast", "mine"]),
    "aliases": st.lists(st.sampled_from(["fast", "small"]), max_size=2).map(tuple),
    "devices": st.sampled_from([(), (_CPU,), (_CPU, _GPU)]),  # node_devices_measured's
    "gpu_offload": st.booleans(),
    "file": st.sampled_from(["entry-1.bin", "entry-2.bin"]),  # prompt_cache_*: saved, restored, discarded
    "tokens": st.integers(0, 8000),
    "name": st.sampled_from(["alice", "batch"]),  # key_*: created, changed, revoked
    "key_id": st.sampled_from(["0123456789ab", "ba9876543210"]),
    "salt": st.just("00" * 16),
    "digest": st.just("ab" * 32),
}


# Every other required field: a fixed plausible value (what the fold keys on is above).
FIELDS = {**{k: st.just(v) for k, v in EXAMPLE_VALUES.items()}, **_KEY_FIELDS}


def _payload(cls: type[ev.Event]) -> st.SearchStrategy[ev.Event]:
    names = {f.name for f in dataclasses.fields(cls)}
    missing = set(ev.required_fields(cls)) - set(FIELDS)
    assert not missing, f"{cls.__name__}: no strategy for required {sorted(missing)}"  # never inferred from types
    return st.builds(cls, **{k: v for k, v in FIELDS.items() if k in names})


payloads = st.one_of(*[_payload(cls) for cls in ev.EVENT_TYPES.values()])
envelopes = st.tuples(st.sampled_from([*MODELS, None]), payloads)
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def recorded_sequence(items: list[tuple[str | None, ev.Event]]) -> list[ev.Recorded]:
    """Give generated payloads positions and times, as the store would."""
    return [
        ev.Recorded(
            position=i + 1,
            event_id=f"evt-{i}",
            model=model,
            event=payload,
            source={"kind": "test"},
            recorded_at=T0 + timedelta(seconds=i),
        )
        for i, (model, payload) in enumerate(items)
    ]


event_sequences = st.lists(envelopes, max_size=60).map(recorded_sequence)
