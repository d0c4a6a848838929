"""Two ``modelrouter serve --node`` processes on 127.0.0.1, two homes and model dirs, one PostgreSQL log.

Node ``a`` holds ``tiny-a`` and ``tiny-s``; node ``b`` holds ``tiny-b`` and ``tiny-s`` and has more
memory, so ``tiny-s`` goes to ``b`` first. Every request goes through node ``a`` with the API key:
what ``b`` serves is forwarded there (streaming too), and so are the reads of its worker's log
(``/models/{id}/logs``, and ``/logs/stream`` followed). Then ``b`` is killed with SIGKILL: ``a``
records ``node_lost`` and the lost instance within 10 s and places ``tiny-s`` again, on itself.
The second test (after the first: it restarts ``b``) cuts ``b``'s lock connection while ``b`` is
paused, so that ``a`` records it lost while it is alive: ``b`` re-joins, stops its inference worker,
and takes its interrupted download back; then
``b`` stops cleanly and is recorded as left.
The third (``b`` started again) asks ``a`` for ``tiny-hub``, an ``hf-repo`` preset no node holds: it
is downloaded by ``b``, which has more room, into ``b``'s cache, then served there (the job's log,
asked of ``a``, is read from ``b``); a download that ``b`` runs is cancelled through ``a``. The fourth kills ``b`` while it streams a forwarded
generation: the stream ends with an error event at once, ``a`` serves the model itself, and
downloads ``tiny-hub`` again (its one holder is lost). The fifth freezes ``b`` (SIGSTOP: its sockets
stay open, as a hung or cut-off machine's do) while it streams a forwarded generation, and cuts its
lock connection: once ``a`` records it lost, the stream ends with the error event, not a hang.
The sixth pulls a model through ``a``: it lands on ``b``, which has more free room; ``b`` serves it and
is killed; a chat for it on ``a`` is answered once ``a`` downloaded it again and loaded it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import psutil
import psycopg
import pytest
from httpx_sse import connect_sse

from devtools.hub_repos import make_repo
from devtools.hub_server import HubServer
from devtools.postgres_server import PostgresServer
from devtools.service_process import ServiceProcess
from devtools.tiny_gguf import write_tiny_gguf
from service.cluster.membership import RECONNECT_GRACE, lock_application_name
from tests.conftest_hub import unique_repo
from tests.eventually import eventually
from tests.service_probes import all_running, still_running

KEY = "cluster-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
GiB = 1024**3
MiB = 1024**2
CHAT = {"messages": [{"role": "user", "content": "hello"}], "max_tokens": 3}
SLOW_REPO = unique_repo("slow")  # an hf-repo preset whose download the hub throttles, to be cancelled
SPEC_REPO, DRAFT_REPO = unique_repo("spec"), unique_repo("spec-draft")  # a model and its -hfd draft


def _node(root: Path, name: str, models: tuple[str, ...], memory: int, hub: str, reserve: int) -> ServiceProcess:
    folder = root / f"models-{name}"
    for i, model in enumerate(models):
        write_tiny_gguf(folder / f"{model}.gguf", seed=i)
    env = {
        "MODELROUTER_MODELS_DIR": str(folder),
        "MODELROUTER_MEMORY_BYTES": str(memory),
        "MODELROUTER_MODELS_MEMORY_MARGIN": "0",
        "HF_ENDPOINT": hub,
        "MODELROUTER_DISK_RESERVE_BYTES": str(reserve),
    }
    # The same presets on every node (an hf-repo model nobody holds yet), and endless generations
    # possible (a full context shifts) for the stream cut by a kill.
    args = ["--api-key", KEY, "--models-preset", str(root / "presets.ini"), "--context-shift"]
    return ServiceProcess(root / f"home-{name}", env=env, args=args, advertised=True)


@pytest.fixture(scope="module")
def cluster(
    pg_server: PostgresServer, hub_server: HubServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[ServiceProcess, ServiceProcess]]:
    root = tmp_path_factory.mktemp("cluster")
    url = pg_server.create_database("cluster_two_nodes", template="modelrouter_template")
    repo = unique_repo("hub-only")
    make_repo(hub_server.root, repo, {"hub-only-Q8_0.gguf": write_tiny_gguf(root / "hub-only.gguf").read_bytes()})
    make_repo(hub_server.root, SLOW_REPO, {"slow-Q4_K_M.gguf": 8 * MiB})
    tiny = write_tiny_gguf(root / "spec.gguf", seed=7).read_bytes()
    make_repo(hub_server.root, SPEC_REPO, {"spec-Q8_0.gguf": tiny})
    make_repo(hub_server.root, DRAFT_REPO, {"draft-Q8_0.gguf": tiny})  # itself: every draft is accepted
    (root / "presets.ini").write_text(
        f"[tiny-hub]\nhf-repo = {repo}:Q8_0\n\n[slow]\nhf-repo = {SLOW_REPO}:Q4_K_M\n\n"
        f"[tiny-spec]\nhf-repo = {SPEC_REPO}:Q8_0\nspec-type = draft-simple\nhf-repo-draft = {DRAFT_REPO}:Q8_0\n"
    )
    # One disk for both homes: b keeps a smaller disk reserve, so it has more room for downloads.
    a = _node(root, "a", ("tiny-a", "tiny-s"), 4 * GiB, hub_server.url, reserve=GiB)
    b = _node(root, "b", ("tiny-b", "tiny-s"), 8 * GiB, hub_server.url, reserve=64 * MiB)
    for proc, name in ((a, "a"), (b, "b")):
        proc.args += ["--database-url", url, "--node", name]
    with all_running(a, b):
        yield a, b


def _get(svc: ServiceProcess, path: str, **params: Any) -> Any:
    return httpx.get(f"{svc.url}{path}", params=params, headers=AUTH, timeout=30).json()


def _events(svc: ServiceProcess, **params: Any) -> list[dict[str, Any]]:
    return list(_get(svc, "/events", limit=1000, **params)["events"])


def _entry(svc: ServiceProcess, model: str) -> dict[str, Any]:
    return next(m for m in _get(svc, "/models")["data"] if m["id"] == model)


def _ports_to(port: int) -> set[int]:
    """The client-side ports of every TCP connection on this machine to ``port``, in any state and
    whichever side closed it (TIME_WAIT too)."""
    found = set()
    for c in psutil.net_connections(kind="tcp"):
        if c.raddr and c.raddr.port == port:
            found.add(c.laddr.port)
        elif c.raddr and c.laddr.port == port:
            found.add(c.raddr.port)
    return found


def _chat(svc: ServiceProcess, model: str) -> httpx.Response:
    return httpx.post(f"{svc.url}/v1/chat/completions", json={"model": model, **CHAT}, headers=AUTH, timeout=90)


@pytest.mark.timeout(300)
def test_two_nodes_place_forward_and_survive_a_kill(
    cluster: tuple[ServiceProcess, ServiceProcess], pg_server: PostgresServer
) -> None:
    a, b = cluster
    nodes = eventually(lambda: (n := _get(a, "/nodes")["data"]) and len(n) == 2 and n, "both nodes joined")
    assert [(n["name"], n["state"]) for n in nodes] == [("a", "up"), ("b", "up")]
    assert {n["name"]: n["holds"] for n in nodes} == {"a": ["tiny-a", "tiny-s"], "b": ["tiny-b", "tiny-s"]}
    assert _get(b, "/nodes")["node"] == "b" and len(_get(b, "/nodes")["data"]) == 2, "any node answers for all"
    assert {e["source"]["node"] for e in _events(a, node="b")} == {"b"}
    env = {**os.environ, "MODELROUTER_URL": a.url, "MODELROUTER_API_KEY": KEY, "COLUMNS": "200"}
    printed = subprocess.run(
        [sys.executable, "-m", "service.cli", "nodes"], env=env, capture_output=True, text=True, timeout=60, check=True
    ).stdout
    rows = {line.split()[0]: line.split() for line in printed.splitlines()[1:] if line.strip()}
    assert rows["a"][1:3] == ["(this)", "up"] and rows["b"][1] == "up", printed

    # A model only b holds, asked of a: placed on b (an event b acts on), then forwarded, key included.
    assert _chat(a, "tiny-b").status_code == 200
    requested = _events(a, type="instance_requested", model="tiny-b")
    assert [(e["data"]["node"], e["source"]["node"]) for e in requested] == [("b", "a")]
    assert _entry(a, "tiny-b")["status"]["node"] == "b" and _entry(b, "tiny-b")["status"]["node"] == "b"

    # Its worker's log, asked of a, is read from b's disk (b ran it): a asks b, the key passed on.
    def log_of_b() -> dict[str, Any] | None:
        answer = httpx.get(f"{a.url}/models/tiny-b/logs", params={"tail": 1000}, headers=AUTH, timeout=30)
        assert answer.status_code == 200, answer.text
        body: dict[str, Any] = answer.json()
        return body if any("print_info" in line for line in body["lines"]) else None

    remote = eventually(log_of_b, "b's load log through a")
    assert remote["log_path"].startswith(str(b.home)) and remote["instance_id"] == requested[0]["data"]["instance_id"]
    # Followed through a: b's stream relayed, the line b's worker writes for the next request included;
    # Last-Event-ID goes on to b, which resumes right after that line; so does a key given as ?api_key=.
    with httpx.Client(timeout=60) as http:
        params = {"model": "tiny-b", "tail": 1}
        with connect_sse(http, "GET", f"{a.url}/logs/stream", params=params, headers=AUTH) as source:
            log_events = (e for e in source.iter_sse() if e.event == "log")
            last = next(log_events)
            assert _chat(a, "tiny-b").status_code == 200
            seen = [next(log_events)]
            while '"request_finished"' not in seen[-1].data:
                seen.append(next(log_events))
        resumed, keyed = {"Last-Event-ID": last.id}, {**params, "api_key": KEY}
        with connect_sse(http, "GET", f"{a.url}/logs/stream", params=keyed, headers=resumed) as source:
            assert next(e for e in source.iter_sse() if e.event == "log").id == seen[0].id
    assert _get(a, "/models/tiny-b/history")["loads"][-1]["node"] == "b"
    assert _entry(a, "tiny-s")["held_by"] == ["a", "b"] and _entry(a, "tiny-a")["held_by"] == ["a"]
    client = openai.OpenAI(base_url=f"{a.url}/v1", api_key=KEY)
    stream = client.chat.completions.create(model="tiny-b", stream=True, **CHAT)  # type: ignore[call-overload]
    chunks = list(stream)
    assert len(chunks) >= 2 and chunks[-1].choices[0].finish_reason is not None
    # b records a stream's request_completed once its generator ends, after the client saw the last chunk
    streamed = eventually(
        lambda: [e for e in _events(b, type="request_completed", model="tiny-b") if e["data"]["stream"]],
        "b recorded the streamed request",
    )
    served = _events(b, type="request_completed", model="tiny-b")
    assert streamed and streamed[0] in served, "b streamed it"
    # the first chat, the one while the log was followed, the stream: each recorded once, by b
    assert {e["source"]["node"] for e in served} == {"b"} and len(served) == 3, "recorded once, by the node serving it"
    unauthorised = httpx.post(f"{a.url}/v1/chat/completions", json={"model": "tiny-b", **CHAT}, timeout=30)
    assert unauthorised.status_code == 401
    # Forwarded requests one after another share a's pooled keep-alive connection to b: a connection
    # per request (a new handshake each time, a socket left in TIME_WAIT) would show here as new ports.
    before = _ports_to(b.port)
    for _ in range(5):
        assert _chat(a, "tiny-b").status_code == 200
    assert len(_ports_to(b.port) - before) <= 1, "a opened a connection to b per forwarded request"

    # Both nodes get the same burst for tiny-s at once: one decision wins, one worker, on b (more memory).
    statuses: list[int] = []
    burst = [
        threading.Thread(target=lambda s=s: statuses.append(_chat(s, "tiny-s").status_code)) for s in (a, b, a, b, a, b)
    ]
    for t in burst:
        t.start()
    for t in burst:
        t.join()
    assert statuses == [200] * 6
    started = _events(a, type="instance_requested", model="tiny-s")
    assert [e["data"]["node"] for e in started] == ["b"], started

    # The database restarts under the cluster: b keeps serving its loaded model meanwhile; afterwards
    # both nodes take their locks again, nobody is recorded lost, and forwarding works again.
    pg_server.stop("immediate")
    try:
        during = _chat(b, "tiny-s")
    finally:
        pg_server.start()
    assert during.status_code == 200, during.text
    for svc in (a, b):
        eventually(lambda s=svc: httpx.get(f"{s.url}/health", timeout=5).status_code == 200, "healthy", timeout=60)
    assert _chat(a, "tiny-s").status_code == 200
    for svc in (a, b):  # each node's first pass over the others' locks after its grace (RECONNECT_GRACE)
        eventually(
            lambda s=svc: "node_watch_resumed" in s.log_text(), "the watch resumed", timeout=RECONNECT_GRACE + 60
        )
    assert _events(a, type="node_lost") == [] and [n["state"] for n in _get(b, "/nodes")["data"]] == ["up", "up"]

    # kill -9 of b: a records node_lost and the lost instances within 10 s, then serves tiny-s itself.
    lost_instance = _entry(a, "tiny-s")["status"]["instance"]["instance_id"]
    b.kill9()
    killed = time.monotonic()
    lost = eventually(lambda: _events(a, type="node_lost"), "node_lost", timeout=10, interval=0.1)
    assert time.monotonic() - killed < 10
    assert lost[0]["data"]["node"] == "b" and lost[0]["data"]["detected_by"] == "a"
    ended = _events(a, type="instance_lost", model="tiny-s")
    assert [e["data"]["instance_id"] for e in ended] == [lost_instance] and ended[0]["data"]["reason"] == "node_lost"
    assert [n["state"] for n in _get(a, "/nodes")["data"]] == ["up", "lost"]
    assert _chat(a, "tiny-s").status_code == 200
    assert _entry(a, "tiny-s")["status"]["node"] == "a"
    assert [e["data"]["node"] for e in _events(a, type="instance_requested", model="tiny-s")] == ["b", "a"]


def _nodes(svc: ServiceProcess) -> dict[str, dict[str, Any]]:
    return {n["name"]: n for n in _get(svc, "/nodes")["data"]}


def _terminate_lock_connection(svc: ServiceProcess, node: str) -> int:
    """What a partition between ``node`` and the database looks like to the database: its lock
    connection ends (the other connections, and the node itself, are untouched)."""
    url = svc.args[svc.args.index("--database-url") + 1]
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
            (lock_application_name(node),),
        ).fetchall()
    return sum(1 for (done,) in rows if done)


@pytest.mark.timeout(300)
def test_a_node_recorded_lost_while_alive_rejoins_and_a_clean_stop_is_left_not_lost(
    cluster: tuple[ServiceProcess, ServiceProcess], hub: HubServer
) -> None:
    a, b = cluster
    if b.proc is None or b.proc.poll() is not None:
        b.start(timeout=60)  # killed by the test above: b comes back as a new incarnation
    first = eventually(lambda: (n := _nodes(a)) and n["b"]["state"] == "up" and n["b"], "b up again")
    assert _chat(a, "tiny-b").status_code == 200  # placed on b, the only node that holds it
    running = _entry(a, "tiny-b")["status"]["instance"]["instance_id"]
    loading = [e for e in _events(a, type="instance_loading", model="tiny-b") if e["data"]["instance_id"] == running]
    worker = psutil.Process(loading[0]["data"]["pid"])
    # ... and a download, held at half way by the hub (once: a resumed request gets the rest).
    repo = unique_repo("cut")
    make_repo(hub.root, repo, {"m-Q4_K_M.gguf": 8 * MiB})
    hub.set_faults(
        {"kind": "throttle", "repo": repo, "rate": 4 * MiB, "times": 1},
        {"kind": "stall", "repo": repo, "at_fraction": 0.5},
    )
    job_id = httpx.post(f"{b.url}/models", json={"model": repo}, headers=AUTH, timeout=30).json()["job_id"]
    job = eventually(lambda: (j := _get(b, f"/downloads/{job_id}"))["bytes_done"] >= 2 * MiB and j, "b downloads")
    fetcher = psutil.Process(job["pid"])
    lost_before = len(_events(a, type="node_lost"))

    # b's lock connection is cut while b is paused: a finds the lock free and records b lost, with
    # its instance. Then b runs again and finds itself lost in the log, with its worker still running.
    os.kill(b.pid, signal.SIGSTOP)
    try:
        assert _terminate_lock_connection(a, "b") == 1
        lost = eventually(lambda: _events(a, type="node_lost")[lost_before:], "b recorded lost", timeout=30)
        assert [(e["data"]["node"], e["data"]["incarnation"]) for e in lost] == [("b", first["incarnation"])]
        closed = [e["data"] for e in _events(a, type="instance_lost", model="tiny-b")]
        assert {"instance_id": running, "reason": "node_lost"}.items() <= closed[-1].items()
        interrupted = [e["data"] for e in _events(a, type="download_interrupted") if e["data"]["job_id"] == job_id]
        assert [e["reason"] for e in interrupted] == ["node_lost"]
        assert worker.is_running() and fetcher.is_running(), "alive, yet lost in the log"
    finally:
        os.kill(b.pid, signal.SIGCONT)
    again = eventually(
        lambda: (n := _nodes(a)) and n["b"]["incarnation"] != first["incarnation"] and n["b"],
        "b joined again as a new incarnation",
        timeout=30,
    )
    assert again["state"] == "up"
    assert not still_running([worker], timeout=30), "b's ended worker stopped"
    assert "node_recorded_lost_while_alive" in b.log_text()
    # b's download worker was stopped (keeping its partial) and the job resumed by b, to the end.
    done = eventually(lambda: (j := _get(a, f"/downloads/{job_id}"))["status"] == "finished" and j, "resumed job done")
    assert not still_running([fetcher], timeout=0)
    resumed = [e for e in _events(a, type="download_resumed") if e["data"]["job_id"] == job_id]
    assert [e["source"]["node"] for e in resumed] == ["b"] and resumed[0]["data"]["bytes_on_disk"] >= 2 * MiB, done
    after_lost = [e for e in _events(a, model="tiny-b") if e["data"].get("instance_id") == running]
    assert after_lost[-1]["type"] == "instance_lost", "the stopped worker recorded nothing more"
    assert _chat(a, "tiny-b").status_code == 200 and _entry(a, "tiny-b")["status"]["node"] == "b"

    # SIGTERM: b stops its workers, appends node_left with router_stopped, then lets go of its lock.
    b.stop()
    gone = eventually(lambda: (n := _nodes(a)) and n["b"]["state"] != "up" and n["b"], "a sees b gone", timeout=30)
    assert gone["state"] == "left" and gone["left_at"] and gone["lost_at"] is None
    assert gone["incarnation"] == again["incarnation"]
    left = _events(a, type="node_left")
    assert [(e["data"]["node"], e["data"]["incarnation"], e["source"]["node"]) for e in left] == [
        ("b", again["incarnation"], "b")
    ]
    assert len(_events(a, type="node_lost")) == lost_before + 1, "a node that left is not recorded lost"
    assert _nodes(a)["a"]["state"] == "up" and _chat(a, "tiny-s").status_code == 200


def _up_again(a: ServiceProcess, b: ServiceProcess) -> dict[str, Any]:
    """``b`` running and joined (the tests above kill or stop it)."""
    if b.proc is None or b.proc.poll() is not None:
        b.start(timeout=60)
    return eventually(lambda: (n := _nodes(a)) and n["b"]["state"] == "up" and n["b"], "b up again", timeout=60)


def _hub_only_files(home: Path) -> list[Path]:
    """``tiny-hub``'s file in the cache under ``home`` (each node has its own)."""
    return sorted(p for p in home.rglob("hub-only-Q8_0.gguf") if p.is_file())


@pytest.mark.timeout(300)
def test_a_model_no_node_holds_is_downloaded_by_the_node_that_will_serve_it(
    cluster: tuple[ServiceProcess, ServiceProcess], hub: HubServer
) -> None:
    a, b = cluster
    _up_again(a, b)
    nodes = _nodes(a)
    assert nodes["a"]["memory_bytes"] < nodes["b"]["memory_bytes"], "b has more room"
    assert "held_by" not in _entry(a, "tiny-hub") and _hub_only_files(a.home) == _hub_only_files(b.home) == []

    # Asked of a: the download is decided for b (an event b acts on), into b's cache; then the
    # model is placed where its files are, and the request forwarded there.
    answer = _chat(a, "tiny-hub")
    assert answer.status_code == 200, answer.text
    requested = _events(a, type="download_requested", model="tiny-hub")
    assert [(e["data"]["node"], e["source"]["node"]) for e in requested] == [("b", "a")]
    job_id = requested[0]["data"]["job_id"]
    job_events = [e for e in _events(a, model="tiny-hub", type="download_*") if e["data"]["job_id"] == job_id]
    assert [e["type"] for e in job_events][-1] == "download_finished"
    assert {e["source"]["node"] for e in job_events[1:]} == {"b"}, "b's worker moved the bytes"
    assert _get(a, f"/downloads/{job_id}")["node"] == "b"
    # The job's log, asked of a, is read from b's disk (b ran the job).
    job_log = eventually(
        lambda: (
            (j := _get(a, f"/downloads/{job_id}/logs", tail=1000))
            and any('"download_finished"' in line for line in j["lines"])
            and j
        ),
        "b's job log through a",
    )
    assert job_log["log_path"].startswith(str(b.home)) and job_log["job_id"] == job_id
    assert len(_hub_only_files(b.home)) == 1 and _hub_only_files(a.home) == [], "in b's cache, not a's"
    assert _entry(a, "tiny-hub")["held_by"] == ["b"] and _entry(a, "tiny-hub")["status"]["node"] == "b"
    started = _events(a, type="instance_requested", model="tiny-hub")
    assert [(e["data"]["node"], e["data"]["reason"]) for e in started] == [("b", "autoload")]
    served = _events(a, type="request_completed", model="tiny-hub")
    assert [e["source"]["node"] for e in served] == ["b"], "served by b, forwarded by a"

    # A cancel asked of a, for a download b runs: b stops its worker, which records the end.
    hub.set_faults({"kind": "throttle", "repo": SLOW_REPO, "rate": MiB})
    assert httpx.post(f"{a.url}/models/load", json={"model": "slow"}, headers=AUTH, timeout=60).status_code == 200
    slow = _events(a, type="download_requested", model="slow")[0]["data"]
    assert slow["node"] == "b"
    running = eventually(lambda: (j := _get(a, f"/downloads/{slow['job_id']}"))["bytes_done"] > 0 and j, "b fetches")
    fetcher = psutil.Process(running["pid"])
    cancelled = httpx.delete(f"{a.url}/downloads/{slow['job_id']}", headers=AUTH, timeout=60)
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled", cancelled.text
    ends = [e for e in _events(a, type="download_cancelled") if e["data"]["job_id"] == slow["job_id"]]
    assert [e["source"]["node"] for e in ends] == ["b"], "recorded by b's worker (or b), once"
    assert not still_running([fetcher], timeout=30), "b's worker stopped"


def _sse_events(raw: bytes) -> list[dict[str, Any]]:
    lines = [line[6:] for line in raw.decode().split("\n") if line.startswith("data: ")]
    return [json.loads(line) for line in lines if line != "[DONE]"]


def _tiny_s_served_by_b(a: ServiceProcess, b: ServiceProcess) -> int:
    """Both nodes up, tiny-s loaded afresh through ``a`` and placed on ``b``; answers how many
    ``node_lost`` events the log held by then."""
    _up_again(a, b)
    if _entry(a, "tiny-s")["status"]["value"] != "unloaded":
        httpx.post(f"{a.url}/models/unload", json={"model": "tiny-s"}, headers=AUTH, timeout=60).raise_for_status()
    eventually(lambda: _entry(a, "tiny-s")["status"]["value"] == "unloaded", "tiny-s unloaded")
    assert _chat(a, "tiny-s").status_code == 200
    assert _entry(a, "tiny-s")["status"]["node"] == "b", "both hold it: b has more free memory"
    return len(_events(a, type="node_lost"))


@pytest.mark.timeout(300)
def test_a_stream_cut_by_the_kill_of_the_serving_node_ends_with_an_error_at_once(
    cluster: tuple[ServiceProcess, ServiceProcess],
) -> None:
    a, b = cluster
    lost_before = _tiny_s_served_by_b(a, b)

    # An endless generation (no n_predict, no EOS, a full context shifts), forwarded by a to b.
    body = {"model": "tiny-s", "prompt": "go", "n_predict": -1, "temperature": 0, "ignore_eos": True, "stream": True}
    raw = b""
    with httpx.stream("POST", f"{a.url}/completion", json=body, headers=AUTH, timeout=60) as stream:
        assert stream.status_code == 200
        parts = stream.iter_raw()
        while raw.count(b"\n\n") < 3:
            raw += next(parts)  # tokens are flowing
        b.kill9()
        killed = time.monotonic()
        for part in parts:
            raw += part
        ended = time.monotonic() - killed
    assert ended < 10, f"the stream ended {ended:.1f} s after the kill"
    events = _sse_events(raw)
    assert all("content" in e for e in events[:-1]) and len(events) >= 4
    error = events[-1]["error"]
    assert (error["code"], error["type"]) == (503, "unavailable_error"), events[-1]
    assert "node 'b'" in error["message"] and "tiny-s" in error["message"], error

    # a records b lost within 10 s, and serves tiny-s itself on the next request (autoload).
    lost = eventually(lambda: _events(a, type="node_lost")[lost_before:], "node_lost", timeout=10, interval=0.1)
    assert time.monotonic() - killed < 10 and lost[0]["data"]["node"] == "b"
    assert _chat(a, "tiny-s").status_code == 200
    assert _entry(a, "tiny-s")["status"]["node"] == "a"
    # tiny-hub, which only b (lost) holds, is downloaded again by a, the one node up, and served there.
    assert _entry(a, "tiny-hub")["held_by"] == ["b"]
    assert _chat(a, "tiny-hub").status_code == 200
    fetched = _events(a, type="download_requested", model="tiny-hub")
    assert [(e["data"].get("node"), e["source"]["node"]) for e in fetched][-1] == (None, "a")
    assert _entry(a, "tiny-hub")["held_by"] == ["a", "b"] and _entry(a, "tiny-hub")["status"]["node"] == "a"
    assert len(_hub_only_files(a.home)) == 1


@pytest.mark.timeout(300)
def test_a_stream_to_a_frozen_node_ends_with_an_error_once_the_node_is_recorded_lost(
    cluster: tuple[ServiceProcess, ServiceProcess],
) -> None:
    """A node that vanishes without closing its sockets never answers again, and the hop has no read
    timeout: recording it lost is what ends the requests forwarded to it (``AbandonLost``)."""
    a, b = cluster
    lost_before = _tiny_s_served_by_b(a, b)

    # An endless generation forwarded by a to b; b freezes (its kernel keeps the sockets open and
    # acknowledges), then its lock connection is cut, so that a finds its lock free.
    body = {"model": "tiny-s", "prompt": "go", "n_predict": -1, "temperature": 0, "ignore_eos": True, "stream": True}
    raw = b""
    try:
        # The read timeout only bounds a hang (the failure this test is about), well past the loss.
        with httpx.stream("POST", f"{a.url}/completion", json=body, headers=AUTH, timeout=60) as stream:
            assert stream.status_code == 200
            parts = stream.iter_raw()
            while raw.count(b"\n\n") < 3:
                raw += next(parts)  # tokens are flowing: the request reached b
            os.kill(b.pid, signal.SIGSTOP)
            assert _terminate_lock_connection(a, "b") == 1
            cut = time.monotonic()
            for part in parts:
                raw += part
            ended = time.monotonic() - cut
        lost = _events(a, type="node_lost")[lost_before:]
        assert [(e["data"]["node"], e["data"]["detected_by"]) for e in lost] == [("b", "a")]
        assert ended < 10, f"the stream ended {ended:.1f} s after b's lock connection was cut"
        events = _sse_events(raw)
        assert all("content" in e for e in events[:-1]) and len(events) >= 4
        error = events[-1]["error"]
        assert (error["code"], error["type"]) == (503, "unavailable_error"), events[-1]
        assert "node 'b'" in error["message"] and "was lost" in error["message"], error
        assert events[-1]["reason"] == "node_lost", events[-1]
        # b is still frozen: a places tiny-s again, on itself (autoload), and serves it.
        assert _chat(a, "tiny-s").status_code == 200
        assert _entry(a, "tiny-s")["status"]["node"] == "a"
    finally:
        os.kill(b.pid, signal.SIGCONT)
    # Thawed, b finds itself lost, stops the worker the log ended, and joins again.
    eventually(lambda: _nodes(a)["b"]["state"] == "up", "b joined again", timeout=60)


@pytest.mark.timeout(300)
def test_a_pulled_model_whose_only_holder_is_killed_is_downloaded_again_by_the_survivor(
    cluster: tuple[ServiceProcess, ServiceProcess], hub: HubServer, tmp_path: Path
) -> None:
    a, b = cluster
    _up_again(a, b)
    nodes = _nodes(a)
    assert nodes["b"]["disk_room_bytes"] > nodes["a"]["disk_room_bytes"], "b keeps the smaller reserve"
    repo = unique_repo("pulled")
    make_repo(hub.root, repo, {"pulled-Q8_0.gguf": write_tiny_gguf(tmp_path / "pulled.gguf", seed=7).read_bytes()})

    # A pull asked of a lands on b, the node with more free room (an event b acts on), into b's cache.
    pulled = httpx.post(f"{a.url}/models", json={"model": repo}, headers=AUTH, timeout=60)
    assert pulled.status_code == 200, pulled.text
    name, job_id = pulled.json()["model"], pulled.json()["job_id"]
    requested = _events(a, type="download_requested", model=name)
    assert [(e["data"]["node"], e["source"]["node"]) for e in requested] == [("b", "a")]
    eventually(lambda: _get(a, f"/downloads/{job_id}")["status"] == "finished", "b downloaded it")
    assert _entry(a, name)["held_by"] == ["b"]
    assert _chat(a, name).status_code == 200 and _entry(a, name)["status"]["node"] == "b"
    # b records its request_completed off the response path: wait for it before the kill.
    eventually(lambda: _events(a, type="request_completed", model=name), "b's request_completed")

    # kill -9 of b, the one node that holds its files: a chat on a waits while a downloads them
    # again (a recorded job, a's own worker), loads the model, and answers.
    lost_before = len(_events(a, type="node_lost"))
    b.kill9()
    eventually(lambda: _events(a, type="node_lost")[lost_before:], "node_lost", timeout=10, interval=0.1)
    files_on = _entry(a, name)["files_on"]
    assert [(f["node"], f["state"]) for f in files_on] == [("b", "lost")]
    answer = _chat(a, name)
    assert answer.status_code == 200, answer.text
    again = _events(a, type="download_requested", model=name)[1:]
    assert [(e["data"].get("node"), e["source"]["node"]) for e in again] == [(None, "a")], "downloaded by a"
    ended = [e for e in _events(a, model=name, type="download_*") if e["data"]["job_id"] == again[0]["data"]["job_id"]]
    assert ended[-1]["type"] == "download_finished" and ended[-1]["source"]["node"] == "a"
    entry = _entry(a, name)
    assert entry["held_by"] == ["a", "b"] and entry["status"]["node"] == "a", entry
    assert [(f["node"], f["state"]) for f in entry["files_on"]] == [("a", "up"), ("b", "lost")]

    def served_by() -> list[str] | None:  # a records its request_completed off the response path too
        served = [e["source"]["node"] for e in _events(a, type="request_completed", model=name)]
        return served if len(served) >= 2 else None

    assert eventually(served_by, "a's request_completed", interval=0.1) == ["b", "a"]


@pytest.mark.timeout(300)
def test_a_models_hub_draft_is_downloaded_beside_it_and_read_from_that_nodes_disk(
    cluster: tuple[ServiceProcess, ServiceProcess],
) -> None:
    """``hf-repo-draft`` in a cluster: a model no node holds is downloaded by the node that will serve it,
    its draft beside it (a recorded job of its own), and that node's worker drafts with the file on its
    own disk, which ``instance_requested`` names."""
    a, b = cluster
    _up_again(a, b)
    body = {"model": "tiny-spec", "prompt": "hello hello hello", "n_predict": 64, "temperature": 0}
    answer = httpx.post(f"{a.url}/completion", json=body, headers=AUTH, timeout=120)
    assert answer.status_code == 200, answer.text
    assert answer.json()["timings"]["draft_n_accepted"] > 0, answer.json()["timings"]
    (started,) = _events(a, type="instance_requested", model="tiny-spec")
    node = started["data"]["node"] or started["source"]["node"]
    home = {"a": a.home, "b": b.home}[node]

    def fetched_on(model: str) -> list[str]:
        return [
            e["data"].get("node") or e["source"]["node"] for e in _events(a, type="download_requested", model=model)
        ]

    assert fetched_on("tiny-spec") == fetched_on(f"{DRAFT_REPO}:Q8_0") == [node], "both where it runs"
    draft_file = Path(started["data"]["params"]["spec_draft_model"])
    assert draft_file.is_relative_to(home) and draft_file.is_file(), "its own disk's file"
    other = b.home if node == "a" else a.home
    assert not [p for p in other.rglob("draft-Q8_0.gguf") if p.is_file()], "not downloaded twice"
