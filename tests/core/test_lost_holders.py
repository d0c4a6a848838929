"""A cluster's downloads by disk room, and a model whose only copy was on a node that is gone.

Given events (with the node that wrote them), the fold's idea of each node's free disk, where a pull
goes, and what a request for a model only a lost node held does: a pulled model is fetched again from
the job that brought it; one with no Hub source is refused with its reason, never left to time out
as a ``capacity`` error. No fixtures: the fold of a short log.
"""

from __future__ import annotations

import pytest

from service.core import cluster, scheduling
from service.core import download_lifecycle as downloads
from service.core import events as ev
from service.core import instance_decisions as decide
from service.core.demand_queue import Queue
from service.core.errors import CommandRejected
from service.core.fold import replay
from service.core.state import RouterState
from tests.core.examples import example
from tests.core.test_lifecycles import T0
from tests.core.test_placement import Entry, GiB, held, joined, recorded, spec, world

MiB = 1024**2
JOB = "0f0e0d0c-0b0a-4908-8706-050403020100"


def joined_with_disk(node: str, free: int, reserve: int = 0, memory: int = 8 * GiB) -> list[Entry]:
    event = example(
        ev.NodeJoined,
        node=node,
        incarnation=f"{node}-1",
        url=f"http://{node}:8080",
        memory_bytes=memory,
        disk_free_bytes=free,
        disk_reserve_bytes=reserve,
    )
    return [(event, None, node)]


def pulled(name: str, node: str, size: int = GiB, job: str = JOB) -> list[Entry]:
    """``POST /models`` of ``name`` downloaded by ``node``'s worker, to the end."""
    files = ({"path": "m-Q8_0.gguf", "size": size, "sha256": "0" * 64},)
    requested = example(
        ev.DownloadRequested, job_id=job, repo="org/m-GGUF", quant="Q8_0", files=files, total_bytes=size
    )
    started = example(ev.DownloadStarted, job_id=job)
    finished = example(ev.DownloadFinished, job_id=job, files=files, bytes_total=size, bytes_transferred=size)
    return [(requested, name, node), (started, name, node), (finished, name, node)]


def lose(state: RouterState, node: str) -> RouterState:
    lost = ev.NodeLost(node=node, incarnation=f"{node}-1", detected_by="a")
    return replay(recorded((lost, None, "a"), after=state), state)


def facts(node: str, memory: int = 8 * GiB) -> decide.Facts:
    limits = decide.Limits(models_max=4, queue_timeout=60, max_queued_requests=0, load_timeout=300)
    return decide.Facts(limits=limits, now=T0, mono=0.0, node=node, memory=memory)


class TestDiskRoom:
    def test_a_node_s_free_disk_is_what_it_measured_less_its_downloads_plus_its_removals(self) -> None:
        state = world(joined_with_disk("a", 10 * GiB, reserve=GiB), joined_with_disk("b", 10 * GiB))
        assert (state.nodes["a"].disk_free, state.nodes["a"].disk_reserve) == (10 * GiB, GiB)
        assert cluster.disk_room(state, "a") == 9 * GiB
        state = replay(recorded(*pulled("m", "a", size=2 * GiB), after=state), state)
        assert state.nodes["a"].disk_free == 8 * GiB and state.nodes["b"].disk_free == 10 * GiB, "a's, not b's"
        removed = ev.ModelRemoved(files=("/m/m.gguf",), bytes_freed=2 * GiB)
        state = replay(recorded((removed, "m", "a"), after=state), state)
        assert state.nodes["a"].disk_free == 10 * GiB

    def test_a_running_job_s_whole_size_counts_against_its_node_only(self) -> None:
        state = world(joined_with_disk("a", 10 * GiB), joined_with_disk("b", 10 * GiB))
        requested = downloads.request_download(state, "m", JOB, spec(3 * GiB), node="b").events[0].event
        state = replay(recorded((requested, "m", "a"), after=state), state)  # written by a, for b
        assert cluster.disk_room(state, "b") == 7 * GiB and cluster.disk_room(state, "a") == 10 * GiB
        # What it already wrote is on b's disk, but b's free figure falls only when the job finishes.
        started = example(ev.DownloadStarted, job_id=JOB, total_bytes=3 * GiB)
        progress = ev.DownloadProgress(job_id=JOB, bytes_done=GiB, bytes_total=3 * GiB)
        state = replay(recorded((started, "m", "b"), (progress, "m", "b"), after=state), state)
        assert state.models["m"].jobs[JOB].bytes_done == GiB
        assert cluster.disk_room(state, "b") == 7 * GiB

    def test_a_node_that_did_not_measure_has_no_room_known(self) -> None:
        state = world(joined("a", 8 * GiB))
        assert state.nodes["a"].disk_free is None and cluster.disk_room(state, "a") is None


class TestPullSite:
    def test_a_pull_goes_to_the_live_node_with_the_most_room_whoever_was_asked(self) -> None:
        state = world(joined_with_disk("a", 10 * GiB, reserve=GiB), joined_with_disk("b", 10 * GiB))
        assert cluster.pull_site(state, "a", GiB) == "b"
        assert cluster.pull_site(state, "b", GiB) is None, "the roomiest node keeps its own pull"
        assert cluster.pull_site(lose(state, "b"), "a", GiB) is None, "a lost node gets nothing"

    def test_files_that_fit_nowhere_stay_with_the_node_asked_whose_disk_check_refuses(self) -> None:
        state = world(joined_with_disk("a", 2 * GiB), joined_with_disk("b", 3 * GiB))
        assert cluster.pull_site(state, "a", 4 * GiB) is None
        assert cluster.pull_site(state, "a", 2 * GiB + 1) == "b", "it fits b only"

    def test_without_a_cluster_the_service_itself_downloads(self) -> None:
        assert cluster.pull_site(world(joined_with_disk("a", 10 * GiB)), None, GiB) is None

    def test_a_download_for_a_load_skips_a_node_whose_disk_cannot_take_the_files(self) -> None:
        state = world(
            joined_with_disk("a", 64 * GiB, memory=4 * GiB),
            joined_with_disk("b", GiB, memory=8 * GiB),
            [(ev.ModelConfigured(hf_repo="org/m-GGUF:Q8_0"), "m", "a")],
        )
        where = scheduling.download_node(state, "m", 512 * MiB, decide.slot_facts(state, facts("a", 4 * GiB)))
        assert where == "b", "b has the memory and room enough"
        where = scheduling.download_node(state, "m", 2 * GiB, decide.slot_facts(state, facts("a", 4 * GiB)))
        assert where == "a", "2 GiB fit a's disk only"


class TestAModelOnlyALostNodeHeld:
    def test_a_pulled_model_is_fetched_again_from_the_job_that_brought_it(self) -> None:
        state = world(joined_with_disk("a", 10 * GiB), joined_with_disk("b", 10 * GiB), pulled("m", "b"))
        model = state.models["m"]
        assert model.config.hf_repo is None and not scheduling.needs_files(model, state), "b is up"
        state = lose(state, "b")
        model = state.models["m"]
        assert model.available and scheduling.needs_files(model, state)
        source = scheduling.pulled_from(model)
        assert source is not None and (source.repo, source.commit, source.quant) == ("org/m-GGUF", "c" * 40, "Q8_0")
        assert decide.decide_fetch(state, "m", None).effects == (decide.FetchFiles("m", None),)
        assert not downloads.request_download(state, "m", "j2", spec(GiB)).answer.already_downloaded

    def test_a_request_for_a_model_with_no_source_is_refused_with_the_reason_not_capacity(self) -> None:
        state = lose(world(joined_with_disk("a", 10 * GiB), joined_with_disk("b", 10 * GiB), held("m", "b")), "b")
        assert not scheduling.needs_files(state.models["m"], state), "a models-dir file: no Hub source"
        with pytest.raises(CommandRejected) as refused:
            decide.decide_acquire(state, Queue(), "m", autoload=True, mine=None, facts=facts("a"), deadline=60)
        assert (refused.value.code, refused.value.extra["reason"]) == ("model_failed", "files_unavailable")
        assert "node 'b'" in refused.value.message and "no Hub source" in refused.value.message
