"""Optimistic concurrency per model: a decision is appended only if nothing about
its models was appended after the state it saw; otherwise it is taken again.

The race it closes (found by the chaos test): the service decided to cancel a
download on a fold that had not yet seen the worker's ``download_finished``, and
the cancel landed after it, an impossible transition."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.core import events as ev
from service.core.decision import Append, Decision, nothing
from service.core.state import RouterState
from service.event_store.async_store import AsyncEventStore
from service.event_store.codec import NewEvent
from service.event_store.live_state import LiveState
from service.event_store.rows import ConcurrencyConflict
from service.event_store.sync_store import SyncEventStore

M = "org/a-GGUF:Q4_K_M"


def _requested(job: str = "j") -> NewEvent:
    return NewEvent(
        ev.DownloadRequested(job_id=job, repo="org/a-GGUF", commit="c" * 40, files=(), total_bytes=0), model=M
    )


async def test_append_with_a_stale_expectation_writes_nothing(db_path: Path) -> None:
    store = AsyncEventStore(db_path, source={"kind": "test"}, synchronous="NORMAL")
    try:
        [first] = await store.append([_requested()])
        await store.append(
            [NewEvent(ev.DownloadStarted(job_id="j", pid=1, commit="c" * 40, files=(), total_bytes=0), model=M)]
        )  # another writer
        with pytest.raises(ConcurrencyConflict) as conflict:
            await store.append([NewEvent(ev.DownloadCancelRequested(job_id="j"), model=M)], expect={M: first})
        assert (conflict.value.model, conflict.value.expected, conflict.value.found) == (M, first, first + 1)
        assert await store.head() == first + 1
        # Other models do not conflict; an up-to-date expectation appends.
        other = NewEvent(
            ev.DownloadRequested(job_id="k", repo="org/b", commit="c" * 40, files=(), total_bytes=0), model="org/b:Q8_0"
        )
        assert await store.append([other], expect={"org/b:Q8_0": first}) == [first + 2]
        cancel = NewEvent(ev.DownloadCancelRequested(job_id="j"), model=M)
        assert await store.append([cancel], expect={M: first + 1}) == [first + 3]
    finally:
        await store.close()


async def test_decide_takes_the_decision_again_on_the_newer_state(db_path: Path) -> None:
    store = AsyncEventStore(db_path, source={"kind": "router"}, synchronous="NORMAL")
    worker = SyncEventStore(db_path, source={"kind": "download_worker"}, synchronous="NORMAL")
    live = LiveState(store)
    await live.start()
    try:
        await live.record(
            [
                _requested(),
                NewEvent(ev.DownloadStarted(job_id="j", pid=1, commit="c" * 40, files=(), total_bytes=0), model=M),
            ]
        )
        seen: list[str] = []

        def cancel_if_running(state: RouterState) -> Decision[None]:
            job = state.job("j")
            assert job is not None
            seen.append(job.status.value)
            if len(seen) == 1:  # the worker finishes between our read and our append
                worker.append(
                    [
                        NewEvent(
                            ev.DownloadFinished(
                                job_id="j", commit="c" * 40, files=(), bytes_total=0, bytes_transferred=0, duration_ms=0
                            ),
                            model=M,
                        )
                    ]
                )
            if not job.status.active:
                return nothing(None)
            return Decision(None, (Append(ev.DownloadCancelRequested(job_id="j"), M),))

        _, state = await live.decide(cancel_if_running)
        assert seen == ["running", "finished"]
        final = state.job("j")
        assert final is not None and final.status.value == "finished"
        assert state.anomalies == 0
    finally:
        worker.close()
        await live.stop()
        await store.close()
