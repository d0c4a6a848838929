"""Snapshots of the fold: exact JSON round trip, and snapshot + tail == full replay."""

from __future__ import annotations

import ast
import hashlib
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from service.core import events as ev
from service.core import fold as fold_module
from service.core import fold_catalogue, fold_downloads, fold_instances, fold_nodes, fold_prompt_cache, fold_support
from service.core.download_lifecycle import DOWNLOAD_LIFECYCLE
from service.core.events import FileRef
from service.core.fold import replay
from service.core.instance_lifecycle import INSTANCE_LIFECYCLE
from service.core.snapshot import FOLD_VERSION, state_from_json, state_shape, state_to_json
from service.core.state import (
    DownloadJob,
    EngineStats,
    Failure,
    FailureKind,
    Instance,
    InstanceStatus,
    JobStatus,
    ModelConfig,
    ModelState,
    RouterState,
)
from tests.core.strategies import event_sequences

T = datetime(2026, 11, 29, 15, 0, 0, 123456, tzinfo=UTC)


def _through_json(state: RouterState) -> RouterState:
    """What a stored snapshot gives back: encode, text, parse, decode."""
    return state_from_json(json.loads(json.dumps(state_to_json(state))))


@settings(max_examples=300, deadline=None)
@given(event_sequences)
def test_round_trip_is_exact_for_folded_states(events: list[ev.Recorded]) -> None:
    state = replay(events)
    assert _through_json(state) == state


@settings(max_examples=300, deadline=None)
@given(event_sequences, st.data())
def test_snapshot_at_any_cut_plus_tail_equals_full_replay(events: list[ev.Recorded], data: st.DataObject) -> None:
    """The property startup relies on: restore a snapshot taken at any position,
    fold the rest (with overlap, as a tail re-read would), get the full replay."""
    cut = data.draw(st.integers(0, len(events)))
    overlap = data.draw(st.integers(0, cut))
    snapshot = _through_json(replay(events[:cut]))
    assert replay(events[cut - overlap :], snapshot) == replay(events)


def test_round_trip_covers_every_field_with_non_default_values() -> None:
    job = DownloadJob(
        job_id="j1",
        model="org/a",
        status=JobStatus.RUNNING,
        repo="org/a",
        revision="v1",
        commit="c" * 40,
        quant="Q4_K_M",
        files=(FileRef(path="a.gguf", size=3, sha256="ab" * 32, blob_path="/h/b", snapshot_path="/h/s"),),
        bytes_done=1,
        bytes_total=3,
        bytes_per_second=1.5,
        eta_seconds=2.0,
        pid=42,
        pid_started_at=1.25,
        requested_at=T,
        started_at=T + timedelta(seconds=1),
        finished_at=None,
        error=Failure(kind=FailureKind.DOWNLOAD, reason="http_503", message="m", at=T, retryable=True, job_id="j1"),
        discard_requested=True,
    )
    instance = Instance(
        instance_id="i1",
        status=InstanceStatus.READY,
        reason="autoload",
        port=9000,
        pid=7,
        pid_started_at=2.5,
        endpoint="http://127.0.0.1:9000",
        params={"ctx": 4096, "layers": [1, 2]},
        progress=0.75,
        load_ms=12.5,
        n_ctx=4096,
        n_params=10**9,
        architecture="llama",
        requested_at=T,
        ready_at=T,
        stop_reason="idle",
        stats=EngineStats(
            slots_total=4,
            slots_busy=2,
            queue_depth=1,
            prefill_tokens_per_s=250.5,
            decode_tokens_per_s=40.25,
            requests_finished=7,
            at=T,
        ),
    )
    model = ModelState(
        name="org/a",
        source="models_dir",
        created_at=T,
        available=True,
        files=job.files,
        path="/m/a.gguf",
        size=3,
        active_job="j1",
        last_job="j1",
        jobs={"j1": job},
        instance=instance,
        failed=True,
        last_error=Failure(
            kind=FailureKind.CRASH,
            reason="crashed",
            message="m",
            at=T,
            signal=9,
            status_code=137,
            first_request=True,
            stderr_tail="boom",
        ),
        crash_count=2,
        first_request_crashes=1,
        last_used=T,
        added_aliases=("mine",),
        config=ModelConfig(
            aliases=("fast", "small"),
            params={"temp": 0.5},
            ttl_seconds=60.0,
            restart="on_failure",
            load_on_startup=True,
        ),
    )
    state = RouterState(
        position=99,
        models={"org/a": model},
        job_index={"j1": "org/a"},
        router_pid=123,
        router_started_at=T,
        partial_files={"/tmp/x.part": 10},
    )
    restored = _through_json(state)
    assert restored == state
    restored_model = restored.models["org/a"]
    assert restored_model.jobs["j1"].status is JobStatus.RUNNING
    assert restored_model.instance is not None and restored_model.instance.status is InstanceStatus.READY
    assert restored_model.config.aliases == ("fast", "small") and isinstance(restored_model.files, tuple)
    assert restored.router_started_at is not None and restored.router_started_at.utcoffset() == timedelta(0)


def test_empty_state_round_trips() -> None:
    assert _through_json(RouterState()) == RouterState()


def test_decoding_a_dict_of_another_shape_raises() -> None:
    data = state_to_json(RouterState(position=3))
    with pytest.raises(ValueError, match="shape"):
        state_from_json({**data, "new_field": 1})
    missing = dict(data)
    del missing["job_index"]
    with pytest.raises(ValueError, match="shape"):
        state_from_json(missing)


# What FOLD_VERSION promises: a snapshot written by this code equals a fresh
# replay by this code. Pinned per version: the state's shape, the event types the
# fold knew, and the fold's code except handlers of event types added later (a
# new type cannot occur in a log an older fold snapshotted, so its handler never
# invalidates a snapshot). When this test fails, you changed the shape, a helper,
# or the handler of an existing type: if a snapshot taken by the old code could
# differ from a replay by the new code, bump FOLD_VERSION in
# service/core/snapshot.py (old snapshots are then ignored and rebuilt); either
# way, pin the new values below.
PINNED_TYPES = frozenset(
    {
        "router_started",
        "router_stopped",
        "recovery_completed",
        "partial_file_found",
        "model_discovered",
        "model_configured",
        "model_removed",
        "download_requested",
        "download_started",
        "download_progress",
        "download_finished",
        "download_failed",
        "download_cancel_requested",
        "download_cancelled",
        "download_interrupted",
        "instance_requested",
        "instance_loading",
        "loading_progress",
        "instance_ready",
        "instance_load_failed",
        "instance_stop_requested",
        "instance_stopped",
        "instance_crashed",
        "instance_lost",
        "request_completed",
        "models_reloaded",
        "instance_stats",
        "model_aliased",
        "model_alias_removed",
    }
)
# v1 re-pinned without a bump: shared stopped/lost handler, evolve(), import style (same behaviour).
# v2: transitions checked against the lifecycle tables, anomalies counted, progress_at.
# v3: ModelConfig carries llama.cpp's options (args, ignored, hf_repo, hidden...); models_reloaded.
# v4: Instance.stats from instance_stats (the batch engine's load, for GET /models).
# v10: ModelState.added_aliases (model_aliased, model_alias_removed; model_removed drops them); the
# alias types are pinned from v10 on.
# v11: v10 and, from the cluster branch, node_left (NodeState.left, left_at).
# v7: nodes (node_joined/node_lost), holders per node, a model's shape, instances and jobs by node, pin.
# v12: a download job's node from its download_requested's node (placed by another node), else its writer.
# v14: ModelConfig.hang_timeout (the preset's hang-timeout); instance_stopped reason "unresponsive" leaves the
# model failed (instance_unresponsive, new, set its error).
# v17: ModelState.prompt_cache and prompt_cache_restored_tokens (issue 35); model_removed empties the cache.
# v16: devices by node (node_devices_measured, new), Instance.offload from instance_ready.
FOLD_PARTS = (fold_support, fold_catalogue, fold_downloads, fold_instances, fold_nodes, fold_prompt_cache)
FINGERPRINTS = {
    1: ("be17643e0302114b", "14a3bc5f8b098e9b"),
    2: ("2f871af48b68cdf2", "4e44e93998e30512"),
    3: ("e888db85a92445eb", "da2177ace255f470"),
    4: ("43c3dcf25e9986c3", "08b44c7ddd742552"),
    5: ("4e2f2d2bf4600f2e", "f9498c3ae1542468"),  # crash reasons: first-request crashes, requests_done
    6: (
        "0ed5d8dfc25c215d",
        "2e84c42644544f68",
    ),  # typed Failure errors and FileRef files; the fold in modules by lifecycle
    7: ("58eb0b80853bed40", "8bf44c6ee8566124"),  # Instance.keep_alive (Ollama's per-request idle limit)
    # 7 on another branch: ("3866472c1a1ca1f4", "18189863a8592433"), sleep (asleep_since, sleep_idle_seconds)
    8: ("c83db6cc07060c74", "34c120b2f5b7f538"),  # keep_alive and sleep (projector_path: a helper, same behaviour)
    # 7 on the cluster branch: ("5a09f659afeaa49b", "6cadef7995c8accf"), nodes, holders, shapes, pinned
    9: ("6ebb41060c960b4f", "cc0b98b1d095647f"),  # keep_alive, sleep and the cluster
    10: ("842816effcb47a78", "8e7ab6ad199a22b3"),  # names added by Ollama's copy (added_aliases)
    # 10 on the cluster2 branch: ("cc565846feff9ce4", "5848a40f4d61d3dc"), node_left (NodeState.left, left_at)
    11: ("11d5f000864449ef", "8143aadef85be542"),  # copies' names and node_left
    12: ("11d5f000864449ef", "7a9a1038001fdb6a"),  # a download job's node from download_requested's node
    13: ("6740988a22a18b1c", "bbfae94d283abce3"),  # Instance.model_info (llama-server's meta) from instance_ready
    14: ("060080875ebd2268", "88d5e6f77d2ca944"),  # a node's free disk (node_joined, download_finished, removals)
    # 14 on the hung-worker branch: ("57715581feaad79d", "6fbb991123c55fc0"), ModelConfig.hang_timeout, unresponsive
    # 15 before issue 30: ("075f34984a9d9c9b", "a7972746475751d2"); the same fold, its modules now
    # importing service.core.events directly (import service.core.events as ev) instead of through the front
    15: ("075f34984a9d9c9b", "b2d461f184d0e572"),  # both 14s: a node's free disk and the hang watch
    16: ("4f9f2b828967461d", "7680e936f2c64830"),  # devices by node (node_devices_measured), Instance.offload,
    # ModelShape's tensor parts (model_measured embedding_bytes, output_bytes, layers_bytes)
    17: ("94a104af24e73aed", "3524f6ab287ec29f"),  # a model's prompt cache on disk (prompt_cache_saved,
    # _restored, _discarded, new; model_removed drops it): ModelState.prompt_cache, prompt_cache_restored_tokens
    18: ("ef0124709f870c46", "39103bdb6b632243"),  # named API keys (key_created, _changed, _revoked): RouterState.keys
}


def _handled_type(node: ast.stmt) -> str | None:
    """The event TYPE a top-level ``@_on(ev.X)`` handler is registered for."""
    for deco in getattr(node, "decorator_list", []):
        if isinstance(deco, ast.Call) and isinstance(deco.func, ast.Name) and deco.func.id in ("_on", "on"):
            arg = deco.args[0]
            if isinstance(arg, ast.Attribute):
                return str(getattr(ev, arg.attr).TYPE)
    return None


def _fold_code_fingerprint() -> str:
    # The fold and the modules of its handlers, in a fixed order.
    sources = [Path(m.__file__).read_text() for m in (fold_module, *FOLD_PARTS)]
    tree = ast.Module(body=[node for text in sources for node in ast.parse(text).body], type_ignores=[])
    for node in ast.walk(tree):  # docstrings and comments do not change behaviour
        body = getattr(node, "body", None)
        first = body[0] if isinstance(body, list) and body else None
        if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
            body.pop(0)  # type: ignore[union-attr]
    kept = [node for node in tree.body if _handled_type(node) in PINNED_TYPES or _handled_type(node) is None]
    # The fold applies only what the transition tables allow: they are part of its code.
    tables = [
        sorted((repr(k), repr(v)) for k, v in (*lc.table.items(), *((pair, "late") for pair in lc.late)))
        for lc in (INSTANCE_LIFECYCLE, DOWNLOAD_LIFECYCLE)
    ]
    text = "\n".join(ast.dump(node) for node in kept) + repr(tables)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def test_fold_version_tracks_state_shape_and_fold_code() -> None:
    shape = hashlib.sha256(state_shape().encode()).hexdigest()[:16]
    code = _fold_code_fingerprint()
    assert set(ev.EVENT_TYPES) >= PINNED_TYPES, "an event type was removed: bump FOLD_VERSION"
    assert FINGERPRINTS.get(FOLD_VERSION) == (shape, code), (
        f"state shape or fold code changed (now {(shape, code)}): decide whether FOLD_VERSION "
        "must be bumped (see the comment above PINNED_TYPES), then pin the new fingerprints"
    )
