"""``/infill`` with the model's FIM tokens, and slot save/restore/erase, on real workers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from devtools.tiny_gguf import write_tiny_gguf
from tests.workers.conftest import WorkerProc


def _post(url: str, path: str, status: int = 200, **body: Any) -> Any:
    r = httpx.post(url + path, json=body, timeout=60)
    assert r.status_code == status, r.text
    return r.json()


@pytest.mark.timeout(120)
def test_infill_builds_the_fim_prompt(spawn_worker: Any, tmp_path: Path) -> None:
    """``[BOS] FIM_PRE prefix FIM_SUF suffix FIM_MID`` (prefix first; ``--spm-infill``: suffix first),
    answered in the native ``/completion`` shape."""
    model = write_tiny_gguf(tmp_path / "fim.gguf", fim=True)
    psm, spm = spawn_worker(model), spawn_worker(model, "--spm-infill")
    url = psm.wait_ready()
    spm_url = spm.wait_ready()
    body = {"input_prefix": "def f(", "input_suffix": "):\n", "n_predict": 3, "temperature": 0}
    n_prefix = len(_post(url, "/tokenize", content="def f(", add_special=False, parse_special=False)["tokens"])
    n_suffix = len(_post(url, "/tokenize", content="):\n", add_special=False, parse_special=False)["tokens"])
    whole = _post(url, "/infill", **body)
    assert whole["stop"] is True and whole["tokens_evaluated"] == 4 + n_prefix + n_suffix
    assert whole["tokens_predicted"] <= 3 and "content" in whole and "timings" in whole
    with_prompt = _post(url, "/infill", **body, prompt="x = ")
    assert with_prompt["tokens_evaluated"] > whole["tokens_evaluated"]
    assert _post(spm_url, "/infill", **body)["tokens_evaluated"] == whole["tokens_evaluated"]
    assert '"input_suffix" is required' in _post(url, "/infill", 400, input_prefix="a")["error"]["message"]
    assert "input_extra" in _post(url, "/infill", 400, **body, input_extra="x")["error"]["message"]


@pytest.mark.timeout(60)
def test_infill_without_fim_tokens_is_501(ready_worker: WorkerProc) -> None:
    error = _post(ready_worker.endpoint, "/infill", 501, input_prefix="a", input_suffix="b")["error"]
    assert error["type"] == "not_supported_error" and "prefix token is missing" in error["message"]


@pytest.mark.timeout(120)
def test_slot_save_erase_restore(spawn_worker: Any, tiny_gguf: Path, tmp_path: Path) -> None:
    """A slot's cache goes to a file and comes back: the same prompt then reuses it."""
    saves = tmp_path / "slots"
    saves.mkdir()
    url = spawn_worker(tiny_gguf, "-np", "2", "--slot-save-path", str(saves)).wait_ready()
    prompt = {"prompt": "a long enough prompt to be worth keeping", "n_predict": 2, "temperature": 0}
    first = _post(url, "/completion", **prompt)
    slot, cached = first["id_slot"], first["tokens_cached"]
    saved = _post(url, f"/slots/{slot}?action=save", filename="one.bin")
    assert saved["id_slot"] == slot and saved["n_saved"] == cached and saved["n_written"] > 0
    assert (saves / "one.bin").stat().st_size == saved["n_written"] and "save_ms" in saved["timings"]
    assert _post(url, f"/slots/{slot}?action=erase") == {"id_slot": slot, "n_erased": cached}
    restored = _post(url, f"/slots/{slot}?action=restore", filename="one.bin")
    assert restored["n_restored"] == cached and restored["n_read"] == saved["n_written"]
    again = _post(url, "/completion", **prompt)
    assert again["timings"]["cache_n"] == first["tokens_evaluated"] - 1 and again["content"] == first["content"]
    assert "Invalid filename" in _post(url, f"/slots/{slot}?action=save", 400, filename="../x")["error"]["message"]
    assert "Invalid action" in _post(url, f"/slots/{slot}?action=fly", 400)["error"]["message"]
    assert "Invalid slot ID" in _post(url, "/slots/9?action=erase", 400)["error"]["message"]
    missing = _post(url, f"/slots/{slot}?action=restore", 400, filename="nope.bin")["error"]
    assert "Unable to restore slot" in missing["message"]


@pytest.mark.timeout(60)
def test_slot_actions_need_a_save_path(ready_worker: WorkerProc) -> None:
    error = _post(ready_worker.endpoint, "/slots/0?action=erase", 501)["error"]
    assert error["type"] == "not_supported_error" and "--slot-save-path" in error["message"]


@pytest.mark.timeout(60)
def test_a_slot_save_path_that_is_no_directory_fails_the_load(
    spawn_worker: Any, tiny_gguf: Path, tmp_path: Path
) -> None:
    """llama-server refuses a ``--slot-save-path`` that is not a directory at start (common/arg.cpp):
    the load fails saying so, rather than every save failing later."""
    worker = spawn_worker(tiny_gguf, "--slot-save-path", str(tmp_path / "missing"))
    failed = worker.wait_event("instance_load_failed")
    assert failed["message"] == f"--slot-save-path: not a directory: {tmp_path / 'missing'}"
    assert worker.wait_exit() == 3
