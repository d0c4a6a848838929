"""llama-server's context options in the batch engine's context: ``-ub``, ``-fa``, ``-ctk``/``-ctv``,
``--swa-full``, ``--rope-*``, ``--yarn-*``, ``--no-warmup``; and the model's: ``--load-mode`` (and the older
``--mlock``, ``--no-mmap``), ``--lazy-mode``, ``--no-repack``, ``--no-host``, ``--check-tensors``.

First the command line as llama.cpp's own ``llama_context_params`` receives it, then what each
changes in a real worker: a quantized KV cache holds a slot's cells in about half the bytes (the
slot file's size), a quantized V cache without Flash Attention is llama.cpp's load error, and
another RoPE base frequency changes the model's next-token probabilities.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from devtools.tiny_gguf import write_tiny_gguf
from workers.inference._cli import parse_args
from workers.inference._engine_setup import context_config
from workers.inference.llama._bindings import lowlevel
from workers.inference.llama._load import _context_params, model_params

pytest.importorskip("llama_cpp")

FLAGS = [
    "-ub",
    "128",
    "-fa",
    "off",
    "-ctk",
    "q8_0",
    "-ctv",
    "q4_0",
    "--swa-full",
    "--no-warmup",
    "--rope-scaling",
    "yarn",
    "--rope-freq-base",
    "50000",
    "--rope-scale",
    "4",
    "--yarn-orig-ctx",
    "2048",
    "--yarn-ext-factor",
    "0.5",
    "--yarn-attn-factor",
    "1.5",
    "--yarn-beta-slow",
    "2",
    "--yarn-beta-fast",
    "16",
]


def test_the_options_reach_llama_context_params() -> None:
    cfg = context_config(parse_args(["--model-path", "m.gguf", *FLAGS]))
    assert cfg.warmup is False
    p = _context_params(lowlevel(), cfg, 8192)
    assert (p.n_ubatch, p.flash_attn_type, p.type_k, p.type_v, p.swa_full) == (128, 0, 8, 2, True)
    assert (p.rope_scaling_type, p.rope_freq_base, p.rope_freq_scale, p.yarn_orig_ctx) == (2, 50000.0, 0.25, 2048)
    assert (p.yarn_ext_factor, p.yarn_attn_factor, p.yarn_beta_slow, p.yarn_beta_fast) == (0.5, 1.5, 2.0, 16.0)


def test_the_worker_takes_the_cache_types_placement_counts() -> None:
    from service.core.memory import CACHE_TYPE_BYTES
    from workers.inference.llama import CACHE_TYPES

    assert set(CACHE_TYPES) == set(CACHE_TYPE_BYTES)


def test_unset_options_leave_llama_cpps_defaults() -> None:
    cfg = context_config(parse_args(["--model-path", "m.gguf"]))
    p, default = _context_params(lowlevel(), cfg, 8192), lowlevel().llama_context_default_params()
    assert (p.n_ubatch, p.flash_attn_type, p.type_k, p.type_v, p.swa_full) == (512, -1, 1, 1, False)
    for name in ("rope_scaling_type", "rope_freq_base", "rope_freq_scale", "yarn_orig_ctx", "yarn_ext_factor"):
        assert getattr(p, name) == getattr(default, name), name
    assert cfg.warmup is True
    for bad in (["-fa", "sometimes"], ["-ctk", "q3_k"], ["--rope-scaling", "ntk"]):
        with pytest.raises(SystemExit):
            parse_args(["--model-path", "m.gguf", *bad])


def _saved_bytes(spawn_worker: Any, gguf: Path, saves: Path, *extra: str) -> int:
    url = spawn_worker(gguf, "--n-parallel", "1", "--slot-save-path", str(saves), *extra).wait_ready()
    body = {"prompt": "a prompt of a few dozen tokens, " * 4, "n_predict": 1, "temperature": 0}
    assert httpx.post(f"{url}/completion", json=body, timeout=120).status_code == 200
    name = "q8" if extra else "f16"
    saved = httpx.post(f"{url}/slots/0?action=save", json={"filename": name}, timeout=120)
    assert saved.status_code == 200, saved.text
    return int(saved.json()["n_written"])


@pytest.fixture(scope="module")
def wide_heads(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Heads of 32 values: a q8_0 block (llama.cpp refuses a cache type whose block does not divide them)."""
    return write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny-h32.gguf", n_embd=128, n_head=4)


@pytest.mark.timeout(180)
def test_a_q8_0_kv_cache_holds_a_slot_in_about_half_the_bytes(
    spawn_worker: Any, wide_heads: Path, tmp_path: Path
) -> None:
    f16 = _saved_bytes(spawn_worker, wide_heads, tmp_path)
    q8 = _saved_bytes(spawn_worker, wide_heads, tmp_path, "-ctk", "q8_0", "-ctv", "q8_0", "-fa", "on")
    assert 0.45 < q8 / f16 < 0.6, (q8, f16)  # 34 bytes per 32 values against 64, plus the tokens


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("model", "flags", "words"),
    [
        ("wide_heads", ("-ctv", "q8_0", "-fa", "off"), "quantized V cache requires flash_attn"),
        ("tiny_gguf", ("-ctk", "q8_0"), "does not divide n_embd_head_k=16"),
    ],
    ids=["v-without-fa", "block-size"],
)
def test_options_the_context_refuses_fail_the_load_in_llama_cpps_words(
    spawn_worker: Any, request: pytest.FixtureRequest, model: str, flags: tuple[str, ...], words: str
) -> None:
    worker = spawn_worker(request.getfixturevalue(model), *flags)
    failed = worker.wait_event("instance_load_failed", timeout=60)
    assert failed["reason"] == "unsupported_option" and words in failed["message"], failed
    assert worker.wait_exit() == 3


def _first_logprobs(url: str) -> list[float]:
    body = {"prompt": "one two three four five six seven eight", "n_predict": 1, "n_probs": 5, "temperature": 0}
    r = httpx.post(f"{url}/completion", json=body, timeout=120)
    assert r.status_code == 200, r.text
    return [p["logprob"] for p in r.json()["completion_probabilities"][0]["top_logprobs"]]


@pytest.mark.timeout(180)
def test_another_rope_base_frequency_changes_the_next_token_probabilities(spawn_worker: Any, tiny_gguf: Path) -> None:
    plain = _first_logprobs(spawn_worker(tiny_gguf, "--n-parallel", "1").wait_ready())
    again = _first_logprobs(spawn_worker(tiny_gguf, "--n-parallel", "1").wait_ready())
    assert again == plain, "the same context gives the same probabilities"
    based = _first_logprobs(spawn_worker(tiny_gguf, "--n-parallel", "1", "--rope-freq-base", "10").wait_ready())
    assert based != plain


@pytest.mark.parametrize(
    ("flags", "load_mode"),
    [
        ((), None),
        (("--load-mode", "dio"), 4),
        (("--mlock",), 3),
        (("--no-mmap",), 0),
        (("--mlock", "--no-mmap"), 2),
        (("-lm", "mmap", "--no-mmap"), 1),
    ],
)
def test_load_options_reach_llama_model_params(flags: tuple[str, ...], load_mode: int | None) -> None:
    """``--load-mode`` as llama-server; the older ``--mlock`` and ``--no-mmap`` mean what they meant
    (mmap and mlock together; no mmap), and ``--load-mode`` wins over them."""
    lc = lowlevel()
    cfg = context_config(parse_args(["--model-path", "m.gguf", *flags]))
    p = model_params(lc, cfg.model)
    assert p.load_mode == (lc.llama_model_default_params().load_mode if load_mode is None else load_mode)
    extra = model_params(
        lc,
        context_config(
            parse_args(["--model-path", "m", "-lzm", "on", "--no-repack", "--no-host", "--check-tensors"])
        ).model,
    )
    assert (extra.lazy_mode, extra.use_extra_bufts, extra.no_host, extra.check_tensors) == (2, False, True, True)


def _maps_the_file(worker: Any, path: Path) -> bool:
    worker.wait_ready()
    return str(path) in Path(f"/proc/{worker.proc.pid}/maps").read_text()


@pytest.mark.timeout(120)
def test_load_mode_none_reads_the_weights_instead_of_mapping_the_file(spawn_worker: Any, tiny_gguf: Path) -> None:
    assert _maps_the_file(spawn_worker(tiny_gguf, "--n-parallel", "1"), tiny_gguf), "llama.cpp's auto: mmap"
    assert not _maps_the_file(spawn_worker(tiny_gguf, "--n-parallel", "1", "--load-mode", "none"), tiny_gguf)
    assert not _maps_the_file(spawn_worker(tiny_gguf, "--n-parallel", "1", "--no-mmap"), tiny_gguf)
