"""The prompt cache outlives its worker (issue 35): saved at a planned stop, restored by the next
worker of the model, in real worker processes on tiny GGUFs; then the file rules on their own."""

from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Any

import httpx
import pytest

from devtools.tiny_gguf import write_tiny_gguf
from tests.eventually import eventually
from tests.workers.conftest import WorkerProc
from workers.inference.engine._disk_cache import file_sha256
from workers.inference.engine._disk_files import (
    Candidate,
    CorruptFile,
    file_name,
    over_budget,
    prefix_sha256,
    ranked,
    read_header,
    within,
    write_entry,
)

PROMPT = (
    "Once upon a time in a land far away there lived a knight who crossed mountains and rivers, "
    "slept under the stars and spoke with every traveller he met on the long road to the sea"
)
OTHER = "The quick brown fox jumps over the lazy dog, twice, and then a third time for luck, said the old man"
MORE = " and then he came home at last"


@pytest.fixture(scope="module")
def gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf")


def complete(url: str, prompt: str) -> dict[str, Any]:
    body = {"prompt": prompt, "n_predict": 4, "temperature": 0, "cache_prompt": True}
    r = httpx.post(f"{url}/completion", json=body, timeout=120)
    assert r.status_code == 200, r.text
    return dict(r.json())


def n_tokens(url: str, text: str) -> list[int]:
    r = httpx.post(f"{url}/tokenize", json={"content": text, "add_special": True}, timeout=30)
    return list(r.json()["tokens"])


def start(spawn_worker: Any, gguf: Path, cache_dir: Path, *extra: str, sha: str | None = "auto") -> WorkerProc:
    args = ["-c", "256", "--prompt-cache-dir", str(cache_dir), *extra]
    if sha is not None:
        args += ["--model-sha256", file_sha256(str(gguf)) if sha == "auto" else sha]
    w: WorkerProc = spawn_worker(gguf, *args)
    w.wait_ready()
    return w


def stop(w: WorkerProc, reason: str = "unload") -> None:
    assert w.proc.stdin is not None
    w.proc.stdin.write(f"stop {reason}\n".encode())
    w.proc.stdin.flush()
    assert w.wait_exit() == 0, w.stderr_tail()


def save_a_prompt(spawn_worker: Any, gguf: Path, cache_dir: Path) -> WorkerProc:
    """A first worker answers ``PROMPT`` and saves it at its planned stop; the stopped worker."""
    first = start(spawn_worker, gguf, cache_dir)
    complete(first.endpoint, PROMPT)
    stop(first)
    return first


def files(cache_dir: Path) -> list[Path]:
    return sorted(cache_dir.glob("*.lcache"))


@pytest.mark.timeout(240)
def test_a_saved_prefix_is_reused_by_the_next_worker(spawn_worker: Any, gguf: Path, tmp_path: Path) -> None:
    cache_dir = tmp_path / "pc"
    first = save_a_prompt(spawn_worker, gguf, cache_dir)
    saved = first.of_type("prompt_cache_saved")
    assert len(saved) == 1 and saved[0]["model_sha256"] == file_sha256(str(gguf))
    assert saved[0]["settings"]["n_ctx_seq"] == 256 and Path(saved[0]["file"]) in files(cache_dir)
    assert first.types().index("prompt_cache_saved") < first.types().index("instance_stopped")

    second = start(spawn_worker, gguf, cache_dir)
    types = second.types()
    assert types.index("prompt_cache_restored") < types.index("instance_ready"), "restored before ready"
    restored = second.of_type("prompt_cache_restored")[0]
    assert restored["lazy"] is False and restored["tokens"] == saved[0]["tokens"]
    again = complete(second.endpoint, PROMPT + MORE)
    whole, shared = n_tokens(second.endpoint, PROMPT + MORE), n_tokens(second.endpoint, PROMPT)
    n_common = next((i for i, (a, b) in enumerate(zip(whole, shared, strict=False)) if a != b), len(shared))
    assert again["timings"]["cache_n"] == n_common, again["timings"]
    assert again["timings"]["prompt_n"] == len(whole) - n_common, "only the new tokens are evaluated"

    fresh: WorkerProc = spawn_worker(gguf, "-c", "256")
    fresh.wait_ready()
    cold = complete(fresh.endpoint, PROMPT + MORE)
    assert cold["timings"]["prompt_n"] == len(whole) and cold["content"] == again["content"]


@pytest.mark.timeout(240)
def test_a_crashed_save_and_a_kill_leave_nothing_used(spawn_worker: Any, gguf: Path, tmp_path: Path) -> None:
    """A ``*.tmp-*`` (a save cut off by kill -9) is deleted unread; a worker killed with -9 saves
    nothing, and the file of the last planned stop is still used."""
    cache_dir = tmp_path / "pc"
    save_a_prompt(spawn_worker, gguf, cache_dir)
    (good,) = files(cache_dir)
    leftover = cache_dir / (file_name(prefix_sha256([1, 2, 3])) + ".tmp-4242")
    leftover.write_bytes(good.read_bytes()[:100])  # as a save killed half-way leaves it
    second = start(spawn_worker, gguf, cache_dir)
    assert not leftover.exists() and files(cache_dir) == [good]
    assert [r["file"] for r in second.of_type("prompt_cache_restored")] == [str(good)]
    complete(second.endpoint, OTHER)
    second.kill()  # kill -9: nothing saved
    assert files(cache_dir) == [good] and not second.of_type("prompt_cache_saved")
    third = start(spawn_worker, gguf, cache_dir)
    assert third.of_type("prompt_cache_restored")[0]["file"] == str(good)
    assert complete(third.endpoint, PROMPT)["timings"]["prompt_n"] == 1


@pytest.mark.timeout(240)
def test_another_model_or_context_discards_the_files(spawn_worker: Any, gguf: Path, tmp_path: Path) -> None:
    cache_dir, model = tmp_path / "pc", tmp_path / "model.gguf"
    write_tiny_gguf(model, n_ctx=1024)  # room for two context sizes (llama.cpp pads a slot's to 256)
    first = start(spawn_worker, model, cache_dir, "-c", "1024")
    complete(first.endpoint, PROMPT)
    stop(first)
    (saved,) = files(cache_dir)
    other_c = start(spawn_worker, model, cache_dir, "-c", "512")
    assert other_c.of_type("prompt_cache_discarded")[0] | {"bytes": 0} == {
        "file": str(saved),
        "reason": "settings_changed",
        "instance_id": other_c.instance_id,
        "bytes": 0,
    }
    assert not other_c.of_type("prompt_cache_restored") and files(cache_dir) == []
    stop(other_c)  # it served nothing: nothing to save
    assert files(cache_dir) == []

    again = start(spawn_worker, model, cache_dir)
    complete(again.endpoint, PROMPT)
    stop(again)
    write_tiny_gguf(model, seed=1, n_ctx=1024)  # another model at the same path
    changed = start(spawn_worker, model, cache_dir, sha=None)  # its sha256 hashed after the load
    found = eventually(lambda: changed.of_type("prompt_cache_discarded"), "the hash, then the discard")
    assert found[0]["reason"] == "model_changed" and files(cache_dir) == []
    assert not changed.of_type("prompt_cache_restored")


@pytest.mark.timeout(240)
def test_without_a_known_hash_the_files_are_restored_lazily(spawn_worker: Any, gguf: Path, tmp_path: Path) -> None:
    cache_dir = tmp_path / "pc"
    save_a_prompt(spawn_worker, gguf, cache_dir)
    second = start(spawn_worker, gguf, cache_dir, sha=None)
    eventually(lambda: "model_sha256" in second.stderr_tail(100_000), "the model's hash")
    assert not second.of_type("prompt_cache_restored"), "not before a request needs it"
    assert complete(second.endpoint, PROMPT)["timings"]["prompt_n"] == 1
    assert second.of_type("prompt_cache_restored")[0]["lazy"] is True


@pytest.mark.timeout(240)
def test_a_request_before_the_hash_waits_for_it_and_reuses_the_file(
    spawn_worker: Any, gguf: Path, tmp_path: Path
) -> None:
    cache_dir = tmp_path / "pc"
    save_a_prompt(spawn_worker, gguf, cache_dir)
    second = start(spawn_worker, gguf, cache_dir, sha=None)
    # Sent at once: whether or not the hash is done, the saved prefix serves it.
    assert complete(second.endpoint, PROMPT)["timings"]["prompt_n"] == 1
    assert second.of_type("prompt_cache_restored")[0]["lazy"] is True
    # Another prompt that no file serves never waits.
    assert complete(second.endpoint, "Something else entirely")["timings"]["prompt_n"] > 1


@pytest.mark.timeout(240)
def test_the_budget_keeps_the_best_entry_and_drops_the_oldest_file(
    spawn_worker: Any, gguf: Path, tmp_path: Path
) -> None:
    cache_dir = tmp_path / "pc"
    save_a_prompt(spawn_worker, gguf, cache_dir)
    (old,) = files(cache_dir)
    budget = old.stat().st_size * 3 // 2  # room for one entry of this length
    second = start(spawn_worker, gguf, cache_dir, "--cache-disk-max", str(budget))
    complete(second.endpoint, PROMPT.replace("knight", "dragon"))  # as long, and used last: worth more
    stop(second)
    saved = second.of_type("prompt_cache_saved")
    assert len(saved) == 1 and Path(saved[0]["file"]) != old
    dropped = second.of_type("prompt_cache_discarded")
    assert [(d["file"], d["reason"]) for d in dropped] == [(str(old), "budget")]
    assert files(cache_dir) == [Path(saved[0]["file"])] and not old.exists()


@pytest.mark.timeout(120)
def test_a_zero_budget_writes_nothing(spawn_worker: Any, gguf: Path, tmp_path: Path) -> None:
    cache_dir = tmp_path / "pc"
    w = start(spawn_worker, gguf, cache_dir, "--cache-disk-max", "0")
    complete(w.endpoint, PROMPT)
    stop(w)
    assert not w.of_type("prompt_cache_saved") and not cache_dir.exists()


# -- the file rules on their own --------------------------------------------------------------------


def test_a_file_checks_itself(tmp_path: Path) -> None:
    path = tmp_path / "x.lcache"
    state = (ctypes.c_uint8 * 64)(*range(64))
    size, digest = write_entry(path, "ab" * 32, {"n_ctx_seq": 256}, [1, 2, 3], state)
    header = read_header(path)
    assert (header.tokens, header.prefix_sha256, header.size, size) == ([1, 2, 3], digest, size, path.stat().st_size)
    assert digest == prefix_sha256([1, 2, 3]) and not list(tmp_path.glob("*.tmp-*"))
    path.write_bytes(path.read_bytes()[:-1])  # cut short
    with pytest.raises(CorruptFile):
        read_header(path)


def test_ranking_and_budget() -> None:
    old_long = Candidate(list(range(100)), 1000, 0, None)
    recent = Candidate(list(range(200, 260)), 600, 2, None)
    held = Candidate(list(range(50)), 500, 1, None)  # a prefix of old_long: dropped
    order = ranked([old_long, held, recent])
    assert order == [recent, old_long]
    assert within(order, 1200) == [recent], "the best first; the next does not fit"
    files = [(Path("a"), 10, 1.0), (Path("b"), 10, 2.0), (Path("c"), 10, 3.0)]
    assert over_budget(files, {Path("a")}, 15) == [Path("b"), Path("c")], "oldest first, the kept one stays"
    assert over_budget(files, set(), 25) == [Path("a")]
