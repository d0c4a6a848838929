"""The batch engine in a real worker process: parallel slots, chunked prefill, prefix reuse, cancellation.

The tiny model is random, so its text is gibberish; greedy (temperature 0)
requests make it deterministic. No assertion depends on machine speed: tests
wait for signals with generous timeouts and reason about the order of
observed events (stream chunks, ``/slots`` snapshots), never elapsed time.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from devtools.tiny_gguf import write_tiny_gguf
from tests.eventually import eventually
from tests.workers.conftest import WorkerProc

pytest.importorskip("llama_cpp")

N_CTX = 16384
N_BATCH = 8  # small, so any prompt over a few tokens is prefilled over several steps


@pytest.fixture(scope="module")
def engine_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny-16k.gguf", n_ctx=N_CTX)


@pytest.fixture(scope="module")
def engine_worker(tmp_path_factory: pytest.TempPathFactory, engine_gguf: Path) -> Iterator[WorkerProc]:
    import subprocess

    from tests.workers.conftest import REPO_ROOT, worker_command, worker_env

    tmp = tmp_path_factory.mktemp("engine")
    events, stderr_path = tmp / "events.jsonl", tmp / "stderr.log"
    extra = ["--n-ctx", str(N_CTX), "--n-batch", str(N_BATCH), "--n-parallel", "4"]
    with stderr_path.open("wb") as err:
        proc = subprocess.Popen(
            worker_command(engine_gguf, instance_id="engine", events=events, extra=extra),
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=err,
            cwd=REPO_ROOT,
            env=worker_env(),
        )
    w = WorkerProc(proc, events, stderr_path, "engine")
    w.wait_ready()
    yield w
    w.kill()
    if proc.stdin:
        proc.stdin.close()


def _sse(lines: Iterator[str]) -> Iterator[dict[str, Any]]:
    for line in lines:
        if line.startswith("data: ") and line != "data: [DONE]":
            yield json.loads(line[len("data: ") :])


def _complete(url: str, body: dict[str, Any]) -> dict[str, Any]:
    r = httpx.post(f"{url}/v1/completions", json=body, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()


def _stream_text(url: str, body: dict[str, Any]) -> tuple[str, str | None]:
    """The whole text of a streamed completion and its finish reason."""
    parts, finish = [], None
    with httpx.stream("POST", f"{url}/v1/completions", json={**body, "stream": True}, timeout=60) as r:
        assert r.status_code == 200
        for chunk in _sse(r.iter_lines()):
            parts.append(chunk["choices"][0]["text"])
            finish = chunk["choices"][0]["finish_reason"] or finish
    return "".join(parts), finish


def _steps(url: str) -> list[dict[str, Any]]:
    r = httpx.get(f"{url}/engine/steps", timeout=30)
    assert r.status_code == 200
    return list(r.json()["steps"])


def _slots(url: str) -> list[dict[str, Any]]:
    r = httpx.get(f"{url}/slots", timeout=30)
    assert r.status_code == 200
    return list(r.json())


def _wait_for(predicate: Any, what: str, timeout: float = 60.0) -> Any:
    """Poll ``predicate()`` until truthy (generous timeout: a signal, not a speed bound)."""
    return eventually(predicate, what, timeout=timeout, interval=0.001)


def _run_threads(targets: list[Any]) -> None:
    threads = [threading.Thread(target=t) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads)


class TestParallelSlots:
    @pytest.mark.timeout(120)
    def test_eight_streams_with_seeds_and_temperatures_complete_and_greedy_ones_match_solo(
        self, engine_worker: WorkerProc
    ) -> None:
        """8 concurrent streams (4 slots) all finish; each greedy one equals the same request run alone."""
        url = engine_worker.endpoint
        bodies = [
            {
                "prompt": f"request {i}: tell me",
                "max_tokens": 24,
                "seed": 100 + i,
                "temperature": 0.0 if i % 2 == 0 else 0.3 + 0.2 * i,
            }
            for i in range(8)
        ]
        solo = {i: _stream_text(url, b) for i, b in enumerate(bodies) if b["temperature"] == 0.0}
        results: dict[int, tuple[str, str | None]] = {}
        _run_threads([lambda i=i, b=b: results.__setitem__(i, _stream_text(url, b)) for i, b in enumerate(bodies)])
        assert sorted(results) == list(range(8))
        assert all(finish in ("length", "stop") for _, finish in results.values())
        for i, expected in solo.items():
            assert results[i] == expected, f"greedy request {i} differs when batched"

    @pytest.mark.timeout(120)
    def test_cancelling_a_stream_frees_its_slot_and_leaves_the_others_alone(self, engine_worker: WorkerProc) -> None:
        url = engine_worker.endpoint
        others = [{"prompt": f"keep going {i}", "max_tokens": 2000, "temperature": 0.0} for i in range(2)]
        expected = [_stream_text(url, b) for b in others]
        results: dict[int, tuple[str, str | None]] = {}
        others_streaming = threading.Barrier(3)

        def other(i: int) -> None:
            parts, finish = [], None
            with httpx.stream("POST", f"{url}/v1/completions", json={**others[i], "stream": True}, timeout=60) as r:
                for n, chunk in enumerate(_sse(r.iter_lines())):
                    if n == 0:
                        others_streaming.wait()
                    parts.append(chunk["choices"][0]["text"])
                    finish = chunk["choices"][0]["finish_reason"] or finish
            results[i] = ("".join(parts), finish)

        def victim() -> None:
            others_streaming.wait()  # admitted last, so nothing takes its slot after it leaves
            # max_tokens 0 and no end-of-generation token (a sampled one would end it early, its cells kept):
            # until the context is full, ~4K tokens a slot, unless cancelled; a first token shows it holds a slot.
            body = {"prompt": "victim", "max_tokens": 0, "ignore_eos": True, "stream": True}
            with httpx.stream("POST", f"{url}/v1/completions", json=body, timeout=60) as r:
                next(_sse(r.iter_lines()))
            # leaving the block hangs up mid-stream

        _run_threads([lambda: other(0), lambda: other(1), victim])
        assert [results[0], results[1]] == expected  # undisturbed: the same text as alone

        def all_idle() -> list[dict[str, Any]] | None:
            slots = _slots(url)
            return None if any(s["is_processing"] for s in slots) else slots

        # The victim's slot holds the latest task (an earlier test's idle slots may look like it otherwise).
        slot = max(_wait_for(all_idle, "every slot to be idle"), key=lambda s: s.get("id_task", -1))
        assert slot["params"]["n_predict"] == -1 and slot["n_prompt_tokens"] > 0
        # It was cancelled, not ended at its natural end (the full context): an ended request's cells stay
        # for the next prompt, a cancelled one's go (an idle slot's counts are cleared, as llama-server's).
        assert slot["n_cached"] == 0

    @pytest.mark.timeout(120)
    def test_long_prompt_is_prefilled_in_chunks_while_short_streams_keep_streaming(
        self, engine_worker: WorkerProc
    ) -> None:
        """Fairness, proved from the engine's own step log (``GET /engine/steps``), not from when chunks
        reach client threads (which a busy machine can delay): the long prompt is evaluated over many
        steps, and every one of those steps also decodes a token for each short stream still running."""
        url = engine_worker.endpoint
        long_prompt = "x" * 4000  # byte-level vocabulary: ~4000 tokens = 500+ steps of n_batch 8
        shorts_streaming = threading.Barrier(4)  # 3 shorts and the long one
        long_done = threading.Event()
        long_result: dict[str, Any] = {}

        def short(i: int) -> None:
            body = {"prompt": f"short {i}", "max_tokens": 3000, "temperature": 0.0, "stream": True}
            with httpx.stream("POST", f"{url}/v1/completions", json=body, timeout=120) as r:
                first = True
                for _chunk in _sse(r.iter_lines()):
                    if first:
                        first = False
                        shorts_streaming.wait()
                    if long_done.is_set():
                        break  # enough: hang up (also exercises cancellation)

        def long() -> None:
            shorts_streaming.wait()
            body = {"prompt": long_prompt, "max_tokens": 4, "temperature": 0.0, "stream": True}
            with httpx.stream("POST", f"{url}/v1/completions", json=body, timeout=120) as r:
                for chunk in _sse(r.iter_lines()):
                    if chunk.get("timings"):
                        long_result["timings"] = chunk["timings"]
            long_done.set()

        _run_threads([lambda: short(0), lambda: short(1), lambda: short(2), long])

        timings = long_result["timings"]
        evaluated, n_long = timings["prompt_n"], timings["prompt_n"] + timings["cache_n"]  # a few may come cached
        assert evaluated > N_BATCH  # it really was longer than n_batch
        steps = _steps(url)
        prefill = [s for s in steps if any(n_prompt == n_long for _id, n_prompt, _n in s["prefilled"])]
        assert sum(n for s in prefill for _id, n_prompt, n in s["prefilled"] if n_prompt == n_long) == evaluated
        assert len(prefill) >= evaluated // N_BATCH, "the long prompt was not chunked"
        # The short requests: those decoding when the long prompt's first chunk went in (all three had
        # streamed before it was sent; one may since have met an end-of-generation token).
        shorts = set(prefill[0]["decoded"])
        assert shorts, prefill[0]
        ended_at = {task: s["step"] for s in steps for task in s["ended"]}
        for step in prefill:
            running = {t for t in shorts if ended_at.get(t, step["step"] + 1) > step["step"]}
            assert running <= set(step["decoded"]), f"step {step['step']} left {running - set(step['decoded'])} out"

    @pytest.mark.timeout(120)
    def test_second_chat_turn_reuses_the_cached_prefix(self, engine_worker: WorkerProc) -> None:
        url = engine_worker.endpoint
        turn1 = [{"role": "user", "content": "Hello there, this is the first turn of our chat."}]
        r1 = httpx.post(
            f"{url}/v1/chat/completions", json={"messages": turn1, "max_tokens": 6, "temperature": 0}, timeout=60
        ).json()
        reply = r1["choices"][0]["message"]["content"]
        turn2 = [*turn1, {"role": "assistant", "content": reply}, {"role": "user", "content": "And a second question."}]
        r2 = httpx.post(
            f"{url}/v1/chat/completions", json={"messages": turn2, "max_tokens": 6, "temperature": 0}, timeout=60
        ).json()
        t1, t2 = r1["timings"], r2["timings"]
        assert t1["prompt_n"] + t1["cache_n"] == r1["usage"]["prompt_tokens"]
        assert t2["cache_n"] >= r1["usage"]["prompt_tokens"] - 1  # the whole first prompt came from the cache
        assert t2["prompt_n"] == r2["usage"]["prompt_tokens"] - t2["cache_n"] < r2["usage"]["prompt_tokens"]
        # cache_prompt: false evaluates everything again
        body = {"messages": turn2, "max_tokens": 2, "temperature": 0, "cache_prompt": False}
        r3 = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=60).json()
        assert r3["timings"]["cache_n"] == 0 and r3["timings"]["prompt_n"] == r3["usage"]["prompt_tokens"]


class TestSamplingAndFormats:
    @pytest.mark.timeout(120)
    def test_json_schema_response_format_output_parses(self, engine_worker: WorkerProc) -> None:
        schema = {
            "type": "object",
            "properties": {"ok": {"type": "boolean"}, "n": {"type": "integer"}},
            "required": ["ok", "n"],
        }
        formats = [
            {"type": "json_object", "schema": schema},
            {"type": "json_schema", "json_schema": {"name": "answer", "schema": schema}},
        ]
        for seed, fmt in enumerate(formats):
            body = {
                "messages": [{"role": "user", "content": "answer in JSON"}],
                "response_format": fmt,
                "max_tokens": 400,
                "seed": seed,
                "temperature": 0.7,
            }
            r = httpx.post(f"{engine_worker.endpoint}/v1/chat/completions", json=body, timeout=60)
            assert r.status_code == 200, r.text
            value = json.loads(r.json()["choices"][0]["message"]["content"])
            assert isinstance(value["ok"], bool) and isinstance(value["n"], int)

    @pytest.mark.timeout(120)
    def test_forced_tool_call_arguments_parse(self, engine_worker: WorkerProc) -> None:
        """llama-cpp-python's chat handler turns a named tool_choice into a grammar and tool_calls."""
        params = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 8}}, "required": ["city"]}
        tools = [{"type": "function", "function": {"name": "get_weather", "parameters": params}}]
        body = {
            "messages": [{"role": "user", "content": "weather?"}],
            "tools": tools,
            "max_tokens": 200,
            "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
            "seed": 1,
        }
        choice = httpx.post(f"{engine_worker.endpoint}/v1/chat/completions", json=body, timeout=60).json()["choices"][0]
        assert choice["finish_reason"] == "tool_calls"
        call = choice["message"]["tool_calls"][0]["function"]
        assert call["name"] == "get_weather" and isinstance(json.loads(call["arguments"])["city"], str)

    def test_schema_grammars_forbid_raw_control_characters_in_strings(self) -> None:
        """llama-cpp-python's converter allows them (json.loads then fails); the engine patches its rule."""
        from llama_cpp.llama_grammar import json_schema_to_gbnf

        from workers.inference.engine import strict_json_strings

        gbnf = json_schema_to_gbnf(json.dumps({"type": "object", "properties": {"s": {"type": "string"}}}))
        assert gbnf.startswith(r'char ::= [^"\\] |')
        assert strict_json_strings(gbnf).startswith(r'char ::= [^"\\\x7F\x00-\x1F] |')
        assert strict_json_strings(r'root ::= [^"\\]') == r'root ::= [^"\\]'  # other rules untouched

    @pytest.mark.timeout(120)
    def test_gbnf_grammar_on_completions(self, engine_worker: WorkerProc) -> None:
        body = {
            "prompt": "pick:",
            "grammar": 'root ::= ("yes" | "no") "."',
            "max_tokens": 50,
            "temperature": 1.0,
            "seed": 3,
        }
        assert _complete(engine_worker.endpoint, body)["choices"][0]["text"] in ("yes.", "no.")
        bad = httpx.post(f"{engine_worker.endpoint}/v1/completions", json={**body, "grammar": "root ::= ("}, timeout=30)
        assert bad.status_code == 400

    @pytest.mark.timeout(120)
    def test_stop_strings_logit_bias_and_logprobs(self, engine_worker: WorkerProc) -> None:
        url = engine_worker.endpoint
        base = {"prompt": "abc", "max_tokens": 40, "temperature": 0.0}
        full = _complete(url, base)["choices"][0]["text"]
        stop = full[5:7]
        cut = _complete(url, {**base, "stop": [stop]})["choices"][0]
        assert cut["text"] == full[: full.index(stop)] and cut["finish_reason"] == "stop"
        # Banning every token but "a" (byte 0x61 = id 6 + 0x61) forces "aaaa".
        only_a = {str(t): -100 for t in range(262) if t != 6 + 0x61}
        assert _complete(url, {**base, "max_tokens": 4, "logit_bias": only_a})["choices"][0]["text"] == "aaaa"
        lp = _complete(url, {**base, "max_tokens": 3, "logprobs": 2})["choices"][0]["logprobs"]
        assert len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["top_logprobs"]) == 3
        assert all(v <= 0 for v in lp["token_logprobs"]) and all(len(t) >= 1 for t in lp["top_logprobs"])

    @pytest.mark.timeout(120)
    def test_usage_chunk_timings_and_metrics(self, engine_worker: WorkerProc) -> None:
        url = engine_worker.endpoint
        body = {
            "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 5,
            "temperature": 0,  # greedy: an unseeded sample may end at an end-of-generation token first
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=60) as r:
            chunks = list(_sse(r.iter_lines()))
        assert chunks[-2]["choices"][0]["finish_reason"] == "length"
        assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 5
        assert chunks[-1]["timings"]["predicted_n"] == 5
        metrics = httpx.get(f"{url}/metrics", timeout=30).text
        values = {
            line.split()[0]: float(line.split()[1]) for line in metrics.splitlines() if line.startswith("llamacpp:")
        }
        assert values["llamacpp:tokens_predicted_total"] >= 5 and values["llamacpp:n_decode_total"] >= 5
        assert "llamacpp:requests_processing" in values and "llamacpp:prompt_tokens_seconds" in values
        slots = _slots(url)
        assert len(slots) == 4 and all({"id", "n_ctx", "is_processing"} <= set(s) for s in slots)


class TestHeartbeat:
    @pytest.mark.timeout(120)
    def test_the_heartbeat_counts_steps_and_shows_the_one_in_progress_only_while_it_runs(
        self, engine_worker: WorkerProc
    ) -> None:
        """``GET /engine/heartbeat`` (the service's liveness check): a request of several prefill steps moves
        the step counter by at least that many; idle, no step is in progress."""
        url = engine_worker.endpoint
        before = httpx.get(f"{url}/engine/heartbeat", timeout=30).json()
        _complete(url, {"prompt": "heartbeat " * 12, "max_tokens": 4, "temperature": 0})  # > N_BATCH tokens
        after = _wait_for(
            lambda: (
                (b := httpx.get(f"{url}/engine/heartbeat", timeout=30).json())["step_s"] is None
                and not b["waiting"]
                and b
            ),
            "the engine idle again",
        )
        assert after["status"] == "ready"
        assert after["steps"] - before["steps"] >= 4  # several prompt chunks of N_BATCH, then the tokens
        assert after["slowest_s"] > 0
