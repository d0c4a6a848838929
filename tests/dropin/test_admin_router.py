"""llama-server's administration switches through the router (issue 20): ``modelrouter serve
--models-dir DIR`` with the flags on its command line (they reach every model's worker, as
llama.cpp's router passes its own to its children), each request naming its ``model``.

* ``--slot-save-path``: ``POST /slots/{id}?action=save|erase|restore``; without it the worker's 501.
* ``--props``: ``POST /props`` answers ``{"success": true}``; without it the worker's 501.
* ``--metrics``: ``GET /metrics?model=`` is the model's ``llamacpp:*`` series.
* ``-np 2`` with ``--cache-idle-slots`` (llama-server's default): an idle slot keeps its KV
  cache, and the next request with its prompt reuses it.
* ``--sleep-idle-seconds``: the model sleeps (``GET /models`` says ``sleeping``, ``/props``
  ``is_sleeping``), and the next request wakes it.
* ``--no-slots``: ``GET /slots?model=`` is llama-server's 501.

Expected answers from llama.cpp's ``tools/server/server-context.cpp`` (``handle_slots_*``,
``post_props``, ``send_embedding``) and ``server-models.cpp`` (the router reads POST bodies'
``model``, GET queries' ``?model=``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from devtools.service_process import ServiceProcess
from devtools.tiny_gguf import write_tiny_bert, write_tiny_gguf
from tests.dropin.conftest import close_vectors, unit_vector, wait_until
from tests.service_probes import events

# llama-server's answers without the switch, word for word (tools/server/server-context.cpp).
NO_SLOT_ACTIONS = "This server does not support slots action. Start it with `--slot-save-path`"
NO_PROPS = "This server does not support changing global properties. Start it with `--props`"
NO_SLOTS = "This server does not support slots endpoint. Start it with `--slots`"


@pytest.fixture(scope="module")
def saves(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("slot-saves")


@pytest.fixture(scope="module")
def admin(tmp_path_factory: pytest.TempPathFactory, saves: Path) -> Iterator[ServiceProcess]:
    """Every administration switch on, two slots."""
    root = tmp_path_factory.mktemp("admin-on")
    write_tiny_gguf(root / "models" / "tiny.gguf")
    args = [
        "--models-dir",
        str(root / "models"),
        "--slot-save-path",
        str(saves),
        "--props",
        "--metrics",
        "-np",
        "2",
        "--cache-idle-slots",
    ]
    with ServiceProcess(root / "home", args=args) as proc:
        yield proc


@pytest.fixture(scope="module")
def bare(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    """No ``--slot-save-path`` nor ``--props``; ``--no-slots``; the model sleeps after 3 idle seconds."""
    root = tmp_path_factory.mktemp("admin-off")
    write_tiny_gguf(root / "models" / "tiny.gguf")
    args = ["--models-dir", str(root / "models"), "--no-slots", "--metrics", "--sleep-idle-seconds", "3"]
    with ServiceProcess(root / "home", args=args) as proc:
        yield proc


def _post(svc: ServiceProcess, path: str, status: int = 200, **body: Any) -> Any:
    answer = httpx.post(f"{svc.url}{path}", json={"model": "tiny", **body}, timeout=120)
    assert answer.status_code == status, answer.text
    return answer.json()


def _complete(svc: ServiceProcess, prompt: str) -> dict[str, Any]:
    result: dict[str, Any] = _post(svc, "/completion", prompt=prompt, n_predict=2, temperature=0)
    return result


def _series(text: str, name: str) -> float:
    """The value of an unlabelled Prometheus series ``name`` in ``text``."""
    values = [line.split()[-1] for line in text.splitlines() if line.split(" ", 1)[0] == name]
    assert len(values) == 1, f"{name} in:\n{text}"
    return float(values[0])


def _status(svc: ServiceProcess, name: str) -> str:
    data = httpx.get(f"{svc.url}/models", timeout=30).json()["data"]
    status: Any = next(m for m in data if m["id"] == name)["status"]
    return str(status["value"] if isinstance(status, dict) else status)


@pytest.mark.timeout(180)
def test_slot_save_erase_restore_through_the_router(admin: ServiceProcess, saves: Path) -> None:
    """The slot's cache goes to a file in ``--slot-save-path``, erase empties the slot, restore
    brings it back: the same prompt then reuses it and gives the same text."""
    first = _complete(admin, "a long enough prompt to be worth keeping")
    slot, cached = first["id_slot"], first["tokens_cached"]
    assert cached >= first["tokens_evaluated"] > 5
    saved = _post(admin, f"/slots/{slot}?action=save", filename="one.bin")
    assert saved["id_slot"] == slot and saved["filename"] == "one.bin" and saved["n_saved"] == cached
    assert (saves / "one.bin").stat().st_size == saved["n_written"] > 0 and "save_ms" in saved["timings"]
    assert _post(admin, f"/slots/{slot}?action=erase") == {"id_slot": slot, "n_erased": cached}
    assert _post(admin, f"/slots/{slot}?action=erase") == {"id_slot": slot, "n_erased": 0}, "erased: empty"
    restored = _post(admin, f"/slots/{slot}?action=restore", filename="one.bin")
    assert restored["id_slot"] == slot and restored["n_restored"] == cached
    assert restored["n_read"] == saved["n_written"] and "restore_ms" in restored["timings"]
    again = _complete(admin, "a long enough prompt to be worth keeping")
    assert again["id_slot"] == slot and again["content"] == first["content"]
    assert again["timings"]["cache_n"] >= first["tokens_evaluated"] - 1, "the restored cache is reused"
    # The worker's 400s come back through the router as they are.
    assert "Invalid filename" in _post(admin, f"/slots/{slot}?action=save", 400, filename="../x")["error"]["message"]
    assert "Invalid action" in _post(admin, f"/slots/{slot}?action=fly", 400)["error"]["message"]
    assert "Invalid slot ID" in _post(admin, "/slots/9?action=erase", 400)["error"]["message"]
    missing = _post(admin, f"/slots/{slot}?action=restore", 400, filename="nope.bin")["error"]
    assert "Unable to restore slot" in missing["message"]
    # As llama.cpp's router: a POST names its model in the body.
    assert httpx.post(f"{admin.url}/slots/{slot}?action=erase", json={}, timeout=30).status_code == 400


@pytest.mark.timeout(180)
def test_post_props_with_the_flag(admin: ServiceProcess) -> None:
    assert _post(admin, "/props", n_ctx=5) == {"success": True}
    props = httpx.get(f"{admin.url}/props", params={"model": "tiny"}, timeout=60).json()
    assert props["endpoint_props"] is True and props["endpoint_slots"] is True


@pytest.mark.timeout(180)
def test_metrics_of_a_model_through_the_router(admin: ServiceProcess) -> None:
    """``/metrics?model=`` is the worker's ``llamacpp:*`` text; its counters move with a completion.
    Without ``?model=``, the router's own series."""

    def scrape() -> str:
        answer = httpx.get(f"{admin.url}/metrics", params={"model": "tiny"}, timeout=60)
        assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/plain"), answer.text
        return answer.text

    _complete(admin, "warm the model up")
    before = scrape()
    for name in (
        "llamacpp:prompt_tokens_total",
        "llamacpp:tokens_predicted_total",
        "llamacpp:requests_processing",
        "llamacpp:n_decode_total",
    ):
        _series(before, name)
    assert "modelrouter_" not in before, "the model's series, not the router's"
    done = _post(admin, "/completion", prompt="count these tokens", n_predict=4, temperature=0, ignore_eos=True)
    after = scrape()
    predicted = _series(after, "llamacpp:tokens_predicted_total") - _series(before, "llamacpp:tokens_predicted_total")
    assert predicted == done["tokens_predicted"] == 4
    prompt = _series(after, "llamacpp:prompt_tokens_total") - _series(before, "llamacpp:prompt_tokens_total")
    assert prompt == done["timings"]["prompt_n"] > 0
    assert _series(after, "llamacpp:requests_processing") == 0
    own = httpx.get(f"{admin.url}/metrics", timeout=30)
    assert own.status_code == 200 and "modelrouter_" in own.text and "llamacpp:" not in own.text


def _idle_slots_are_reused(svc: ServiceProcess) -> None:
    """Two conversations on two slots: each goes back to the slot that holds its prompt and reuses
    it, the other's request in between notwithstanding."""
    # Prompts longer than ten tokens: sharing only BOS is under llama-server's 10 % slot similarity.
    one, two = "first conversation about cats and dogs", "2nd talk, on rivers and the sea, at length"
    a1, b1 = _complete(svc, one), _complete(svc, two)
    assert a1["id_slot"] != b1["id_slot"], "the second conversation took the other slot"
    a2, b2 = _complete(svc, one), _complete(svc, two)
    assert (a2["id_slot"], b2["id_slot"]) == (a1["id_slot"], b1["id_slot"])
    for first, again in ((a1, a2), (b1, b2)):
        assert first["timings"]["prompt_n"] >= first["tokens_evaluated"] - 2, "a new prompt: evaluated"
        assert again["timings"]["cache_n"] >= first["tokens_evaluated"] - 1, again["timings"]
        assert again["timings"]["prompt_n"] <= 1 and again["content"] == first["content"]
        assert again["tokens_cached"] >= again["tokens_evaluated"]


@pytest.mark.timeout(180)
def test_idle_slots_keep_their_cache(admin: ServiceProcess) -> None:
    """``--cache-idle-slots`` (llama-server's default) is in force, not ignored, and an idle
    slot's prompt is reused by the next request that starts with it."""
    configured = events(admin, type="model_configured", model="tiny")[-1]["data"]
    assert "cache-idle-slots" in configured["args"] and "cache-idle-slots" not in configured["ignored"], configured
    _idle_slots_are_reused(admin)


@pytest.mark.timeout(180)
def test_idle_slots_keep_their_cache_in_a_unified_kv(tmp_path: Path) -> None:
    """``--kv-unified``: as llama-server, an idle slot's prompt leaves the shared cells for the RAM
    prompt cache when the other request starts, and comes back with the next request that needs it."""
    write_tiny_gguf(tmp_path / "models" / "tiny.gguf")
    args = ["--models-dir", str(tmp_path / "models"), "--kv-unified", "-np", "2"]
    with ServiceProcess(tmp_path / "home", args=args) as svc:
        _idle_slots_are_reused(svc)
        slots = httpx.get(f"{svc.url}/slots", params={"model": "tiny"}, timeout=60).json()
        # The last request's start took the other idle slot's cells to RAM.
        assert sorted(s["n_cached"] == 0 for s in slots) == [False, True], slots


@pytest.mark.timeout(240)
def test_without_the_switches_the_worker_answers_501(bare: ServiceProcess) -> None:
    """No ``--slot-save-path``, no ``--props``, ``--no-slots``: llama-server's 501s, through the router."""
    for answer, message in (
        (httpx.post(f"{bare.url}/slots/0?action=erase", json={"model": "tiny"}, timeout=120), NO_SLOT_ACTIONS),
        (httpx.post(f"{bare.url}/props", json={"model": "tiny"}, timeout=120), NO_PROPS),
        (httpx.get(f"{bare.url}/slots", params={"model": "tiny"}, timeout=120), NO_SLOTS),
    ):
        assert answer.status_code == 501, answer.text
        assert answer.json()["error"] == {"code": 501, "message": message, "type": "not_supported_error"}
    props = httpx.get(f"{bare.url}/props", params={"model": "tiny"}, timeout=60).json()
    assert props["endpoint_slots"] is False and props["endpoint_props"] is False


@pytest.mark.timeout(300)
def test_an_idle_model_sleeps_through_the_router(bare: ServiceProcess) -> None:
    """``--sleep-idle-seconds 3`` on a router: the loaded model sleeps (``GET /models``:
    ``sleeping``), ``/props?model=`` says ``is_sleeping`` and ``/metrics?model=`` answers, neither
    waking it; the next request wakes it, and idle again it sleeps again."""
    assert _complete(bare, "hello")["tokens_predicted"] > 0
    wait_until(lambda: _status(bare, "tiny") == "sleeping", "the model asleep", timeout=120)
    stopped = events(bare, type="instance_stopped", model="tiny")
    assert stopped and stopped[-1]["data"]["reason"] == "sleep"
    props = httpx.get(f"{bare.url}/props", params={"model": "tiny"}, timeout=30).json()
    assert props["is_sleeping"] is True and props["model_path"].endswith("tiny.gguf")
    metrics = httpx.get(f"{bare.url}/metrics", params={"model": "tiny"}, timeout=30)
    assert metrics.status_code == 200 and _series(metrics.text, "llamacpp:tokens_predicted_total") > 0
    assert _status(bare, "tiny") == "sleeping", "neither /props nor /metrics wakes it"
    assert _complete(bare, "wake up")["tokens_predicted"] > 0
    assert events(bare, type="instance_requested", model="tiny")[-1]["data"]["reason"] == "wake"
    wait_until(
        lambda: len(events(bare, type="instance_stopped", model="tiny")) > len(stopped), "asleep again", timeout=120
    )
    assert _status(bare, "tiny") == "sleeping"


@pytest.mark.timeout(300)
def test_pooling_flags_pool_the_per_token_vectors(tmp_path: Path) -> None:
    """``--embedding --pooling P`` on the router's command line, one BERT file: ``none`` gives a raw
    vector per token (``[CLS] a b c [SEP]``); ``cls`` is the first row, ``last`` the last, ``mean``
    their average (``embd_normalize: -1``: raw), and each is normalised (L2) by default, as
    llama-server's ``send_embedding`` pools and normalises."""
    write_tiny_bert(tmp_path / "models" / "bert.gguf")
    pooled: dict[str, tuple[list[float], list[float]]] = {}
    tokens: list[list[float]] = []
    for pooling in ("none", "cls", "last", "mean"):
        args = ["--models-dir", str(tmp_path / "models"), "--embedding", "--pooling", pooling]
        with ServiceProcess(tmp_path / f"home-{pooling}", args=args) as svc:
            native = httpx.post(
                f"{svc.url}/embedding", json={"model": "bert", "content": "abc", "embd_normalize": -1}, timeout=120
            )
            assert native.status_code == 200, native.text
            rows = native.json()[0]["embedding"]
            if pooling == "none":
                assert len(rows) == 5 and all(len(r) == 64 for r in rows), "a vector per token"
                refused = httpx.post(f"{svc.url}/v1/embeddings", json={"model": "bert", "input": "abc"}, timeout=60)
                assert refused.status_code == 400 and "not OAI compatible" in refused.json()["error"]["message"]
                tokens = rows
                continue
            assert len(rows) == 1, f"--pooling {pooling}: one vector"
            oai = httpx.post(f"{svc.url}/v1/embeddings", json={"model": "bert", "input": "abc"}, timeout=60)
            assert oai.status_code == 200, oai.text
            pooled[pooling] = rows[0], oai.json()["data"][0]["embedding"]
    mean = [sum(column) / len(tokens) for column in zip(*tokens, strict=True)]
    for pooling, want in (("cls", tokens[0]), ("last", tokens[-1]), ("mean", mean)):
        raw, normalised = pooled[pooling]
        assert close_vectors(raw, want), f"--pooling {pooling}: {raw[:4]} vs {want[:4]}"
        assert close_vectors(normalised, unit_vector(want)), f"--pooling {pooling}: normalised"
    assert not close_vectors(pooled["cls"][0], pooled["last"][0]) and not close_vectors(pooled["cls"][0], mean)


@pytest.mark.timeout(180)
def test_a_slot_save_path_that_is_no_directory_fails_the_models_load(tmp_path: Path) -> None:
    """llama-server refuses a ``--slot-save-path`` that is no directory at start: on the command
    line a usage error (tests/dropin/test_command_line.py); a preset's fails its model's load
    (llama.cpp's router: the child exits), saying why, not every save later."""
    model = write_tiny_gguf(tmp_path / "files" / "tiny.gguf")
    missing = tmp_path / "missing"
    preset = tmp_path / "models.ini"
    preset.write_text(f"[tiny]\nmodel = {model}\nslot-save-path = {missing}\n")
    with ServiceProcess(tmp_path / "home", args=["--models-preset", str(preset)]) as svc:
        answer = httpx.post(f"{svc.url}/completion", json={"model": "tiny", "prompt": "a", "n_predict": 1}, timeout=120)
        said = f"--slot-save-path: not a directory: {missing}"
        assert answer.status_code == 503 and said in answer.json()["error"]["message"], answer.text
        entry = next(m for m in httpx.get(f"{svc.url}/models", timeout=30).json()["data"] if m["id"] == "tiny")
        assert entry["status"]["value"] == "failed" and entry["last_error"]["message"] == said


@pytest.mark.timeout(180)
def test_single_model_mode_takes_the_same_switches(tmp_path: Path) -> None:
    """``-m FILE --slot-save-path DIR --props --metrics``: the same answers without any ``model``."""
    model = write_tiny_gguf(tmp_path / "files" / "tiny.gguf")
    saves = tmp_path / "saves"
    saves.mkdir()
    args = ["-m", str(model), "--slot-save-path", str(saves), "--props", "--metrics"]
    with ServiceProcess(tmp_path / "home", args=args) as svc:

        def post(path: str, **body: Any) -> Any:
            answer = httpx.post(f"{svc.url}{path}", json=body, timeout=120)
            assert answer.status_code == 200, answer.text
            return answer.json()

        first = post("/completion", prompt="keep this prompt in its slot", n_predict=3, temperature=0, ignore_eos=True)
        slot, cached = first["id_slot"], first["tokens_cached"]
        assert post(f"/slots/{slot}?action=save", filename="s.bin")["n_saved"] == cached
        assert (saves / "s.bin").is_file()
        assert post(f"/slots/{slot}?action=erase") == {"id_slot": slot, "n_erased": cached}
        assert post(f"/slots/{slot}?action=restore", filename="s.bin")["n_restored"] == cached
        assert post("/props", n_ctx=5) == {"success": True}
        assert httpx.get(f"{svc.url}/props", timeout=30).json()["endpoint_props"] is True
        metrics = httpx.get(f"{svc.url}/metrics", timeout=30).text
        assert _series(metrics, "llamacpp:tokens_predicted_total") == 3 and "modelrouter_" in metrics
