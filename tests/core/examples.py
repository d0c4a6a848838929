"""Plausible values for every required event field, for tests that state only the fields they are about.

Production writers state every required field (``service/core/events.py``).
A given-events test about, say, an instance's transitions cares about
``instance_id`` and nothing else; :func:`example` fills the other required
fields from :data:`EXAMPLE_VALUES`, so the test shows only what it is about.
``tests/core/test_examples.py`` keeps the table complete.
"""

from __future__ import annotations

from typing import Any, TypeVar

from service.core import events as ev

FILES = ({"path": "m-Q4_K_M.gguf", "size": 100, "sha256": "ab" * 32},)

EXAMPLE_VALUES: dict[str, Any] = {
    "alias": "mine",
    "architecture": "llama",
    "bytes": 100,
    "bytes_done": 50,
    "bytes_on_disk": 50,
    "bytes_total": 100,
    "bytes_transferred": 100,
    "commit": "c" * 40,
    "duration_ms": 12.5,
    "endpoint": "http://127.0.0.1:9000",
    "events_replayed": 0,
    "file_size": 100,
    "file": "entry-1.bin",
    "files": FILES,
    "host": "127.0.0.1",
    "instance_id": "inst-1",
    "interrupted_downloads": 0,
    "job_id": "job-1",
    "load_ms": 12.5,
    "lost_instances": 0,
    "message": "example failure",
    "n_ctx": 4096,
    "n_params": 1000,
    "orphans": 0,
    "model_sha256": "ab" * 32,
    "path": "/models/m-Q4_K_M.gguf",
    "pid": 4242,
    "port": 9000,
    "progress": 0.5,
    "prefill_tokens_per_s": 250.5,
    "prefix_sha256": "cd" * 32,
    "reason": "budget",
    "decode_tokens_per_s": 40.25,
    "queue_depth": 0,
    "requests_finished": 3,
    "slots_busy": 1,
    "slots_total": 4,
    "repo": "org/m-GGUF",
    "resumed_downloads": 0,
    "route": "/v1/chat/completions",
    "size": 100,
    "snapshot_position": 0,
    "status_code": 200,
    "stderr_tail": "",
    "tokens": 4000,
    "total_bytes": 100,
    "version": "0.1.0",
    "node": "node-a",
    "incarnation": "node-a-1",
    "url": "http://127.0.0.1:8081",
    "cpus": 2,
    "ram_bytes": 8 * 1024**3,
    "memory_bytes": 7 * 1024**3,
    "models_max": 4,
    "detected_by": "node-b",
    "weights_bytes": 100,
    "n_layer": 2,
    "n_embd": 64,
    "n_head_kv": 2,
    "n_embd_head_k": 16,
    "n_embd_head_v": 16,
    "n_vocab": 300,
    "n_ctx_train": 2048,
    "refused": 2,
    "outage_ms": 1500.0,
    "location": "/data/modelrouter.db",
    "cause": "no_answer",
    "bound_s": 120.0,
    "steps": 42,
    "last_step_s": 125.0,
    "silent_s": 121.0,
    "requests_waiting": 1,
    "name": "alice",
    "key_id": "0123456789ab",
    "salt": "00" * 16,
    "digest": "ab" * 32,
}
"""Field name -> value; one table for every event type that has the field."""

OVERRIDES: dict[tuple[type[ev.Event], str], Any] = {
    (ev.ModelRemoved, "files"): ("/models/m-Q4_K_M.gguf",),
}
"""Where a field name means something else in one event type."""

E = TypeVar("E", bound=ev.Event)


def example(cls: type[E], **fields: Any) -> E:
    """``cls(**fields)``, with every required field not given taken from the tables above."""
    for name in ev.required_fields(cls):
        if name not in fields:
            fields[name] = OVERRIDES.get((cls, name), EXAMPLE_VALUES[name])
    return cls(**fields)
