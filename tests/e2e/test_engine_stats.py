"""``GET /models`` summarises each batch engine's load from its ``instance_stats`` events
(issue 9: prefill and decode tokens/s, slots busy, queue depth).

The fold stays the single source of truth: the worker appends the summary as an
event when it changed (at most every few seconds), the view renders the last one.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from service.api.schemas import EngineStatsView, InstanceView
from service.api.views import models_view
from service.core import events as ev
from service.core.fold import replay
from tests.e2e.conftest import StartService
from tests.service_probes import events, model_entry

_FIELDS = (
    "slots_total",
    "slots_busy",
    "queue_depth",
    "prefill_tokens_per_s",
    "decode_tokens_per_s",
    "requests_finished",
)


@pytest.mark.timeout(120)
def test_models_shows_the_engine_summary_the_worker_reported(start_service: StartService) -> None:
    svc = start_service()
    body = {"model": "tiny-a", "prompt": "hello", "max_tokens": 8, "temperature": 0.0}
    for _ in range(2):
        assert httpx.post(f"{svc.url}/v1/completions", json=body, timeout=60).status_code == 200

    def settled() -> dict[str, Any] | None:
        """The engine view once it shows both requests done (the worker reports within seconds)."""
        engine = model_entry(svc, "tiny-a")["status"].get("instance", {}).get("engine")
        return engine if engine is not None and engine["requests_finished"] == 2 else None

    deadline = time.monotonic() + 60
    while (engine := settled()) is None:
        assert time.monotonic() < deadline, model_entry(svc, "tiny-a")
        time.sleep(0.1)

    reported = [e["data"] for e in events(svc, type="instance_stats", model="tiny-a")]
    assert reported and {k: engine[k] for k in _FIELDS} == {k: reported[-1][k] for k in _FIELDS}
    slots = httpx.get(f"{svc.url}/slots", params={"model": "tiny-a"}, timeout=30).json()
    assert engine["slots_total"] == len(slots) and engine["slots_busy"] == 0 and engine["queue_depth"] == 0
    assert engine["decode_tokens_per_s"] > 0 and engine["prefill_tokens_per_s"] > 0
    assert engine["updated_at"].endswith("Z") or "+" in engine["updated_at"]
    # An idle model appends nothing more: the last report already says so.
    assert reported.count(reported[-1]) == 1


def test_the_view_renders_the_last_report_and_drops_it_with_the_instance() -> None:
    t0 = datetime(2026, 12, 1, tzinfo=UTC)
    model, inst = "m", "inst-1"
    stats = {
        "slots_total": 4,
        "slots_busy": 3,
        "queue_depth": 2,
        "prefill_tokens_per_s": 812.5,
        "decode_tokens_per_s": 61.0,
        "requests_finished": 9,
    }
    payloads: list[ev.Event] = [
        ev.ModelDiscovered(source="models_dir", path="/m.gguf", files=({"path": "m.gguf", "size": 1},), size=1),
        ev.InstanceRequested(instance_id=inst, port=1),
        ev.InstanceLoading(instance_id=inst, pid=2, endpoint="http://127.0.0.1:1"),
        ev.InstanceReady(
            instance_id=inst,
            pid=2,
            endpoint="http://127.0.0.1:1",
            load_ms=1.0,
            n_ctx=64,
            n_params=1,
            file_size=1,
            architecture="llama",
        ),
        ev.InstanceStats(instance_id=inst, **{**stats, "slots_busy": 1, "requests_finished": 8}),
        ev.InstanceStats(instance_id=inst, **stats),
    ]
    recorded = [
        ev.Recorded(
            position=i + 1, event_id=f"e{i}", model=model, event=p, source={}, recorded_at=t0 + timedelta(seconds=i)
        )
        for i, p in enumerate(payloads)
    ]
    instance = models_view(replay(recorded)).data[0].status.instance
    assert isinstance(instance, InstanceView) and isinstance(instance.engine, EngineStatsView)
    engine = instance.engine
    assert {k: getattr(engine, k) for k in _FIELDS} == stats
    assert engine.updated_at.startswith("2026-12-01T00:00:05")
    stopped = ev.InstanceStopped(instance_id=inst)
    late = ev.InstanceStats(instance_id=inst, **stats)  # a report racing the stop: harmless
    tail = [
        ev.Recorded(
            position=len(recorded) + i + 1,
            event_id=f"t{i}",
            model=model,
            event=p,
            source={},
            recorded_at=t0 + timedelta(minutes=1),
        )
        for i, p in enumerate((stopped, late))
    ]
    state = replay([*recorded, *tail])
    assert state.models[model].instance is None and state.anomalies == 0
