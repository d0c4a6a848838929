"""Ollama's names, keep_alive, options and format in our terms (service.core.ollama), and the
idle limit a keep_alive sets (service.core.scheduling)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from service.core import events as ev
from service.core.fold import fold
from service.core.ollama import FOREVER, InvalidRequest, keep_alive_seconds, model_name, response_format, sampling
from service.core.scheduling import idle_expired, idle_limit, idle_reason
from service.core.state import Instance, InstanceStatus, ModelConfig, ModelState, RouterState

T0 = datetime(2026, 1, 1, tzinfo=UTC)


class TestModelName:
    @pytest.mark.parametrize(
        ("given", "ours"),
        [
            ("hf.co/user/repo-GGUF:Q4_K_M", "user/repo-GGUF:Q4_K_M"),
            ("huggingface.co/user/repo-GGUF:Q8_0", "user/repo-GGUF:Q8_0"),
            ("HF.CO/user/repo-GGUF:Q8_0", "user/repo-GGUF:Q8_0"),
            ("https://huggingface.co/user/repo", "user/repo"),
            ("user/repo:Q4_K_M", "user/repo:Q4_K_M"),
            ("user/repo:latest", "user/repo"),
            ("hf.co/user/repo:latest", "user/repo"),
            ("  tiny-a ", "tiny-a"),
        ],
    )
    def test_hub_prefixes_and_latest_are_dropped(self, given: str, ours: str) -> None:
        assert model_name(given) == ours

    def test_nothing_left_is_refused(self) -> None:
        with pytest.raises(InvalidRequest, match="model is required"):
            model_name("hf.co/")


class TestKeepAlive:
    @pytest.mark.parametrize(
        ("given", "seconds"),
        [
            (None, None),
            (0, 0.0),
            ("0", 0.0),
            (300, 300.0),
            (2.5, 2.5),
            ("5m", 300.0),
            ("1h30m", 5400.0),
            ("1.5h", 5400.0),
            ("300ms", 0.3),
            ("90", 90.0),
            (-1, FOREVER),
            ("-1", FOREVER),
            ("-5m", FOREVER),
            (float("inf"), FOREVER),
        ],
    )
    def test_numbers_are_seconds_strings_are_go_durations_negative_is_forever(
        self, given: float | str | None, seconds: float | None
    ) -> None:
        assert keep_alive_seconds(given) == seconds

    @pytest.mark.parametrize("bad", ["soon", "5 minutes", "m", "", "1x", True])
    def test_anything_else_is_a_clear_refusal(self, bad: str | bool) -> None:
        with pytest.raises(InvalidRequest, match="keep_alive"):
            keep_alive_seconds(bad)


class TestOptions:
    def test_sampling_options_map_onto_the_workers_members(self) -> None:
        options = {
            "temperature": 0.5,
            "top_p": 0.9,
            "top_k": 20,
            "min_p": 0.1,
            "seed": 42,
            "num_predict": 7,
            "stop": "\n",
            "repeat_penalty": 1.1,
            "mirostat": 2,
            "num_thread": 4,
            "num_ctx": 512,
        }
        assert sampling(options, n_ctx=256) == {
            "temperature": 0.5,
            "top_p": 0.9,
            "top_k": 20,
            "min_p": 0.1,
            "seed": 42,
            "max_tokens": 7,
            "stop": ["\n"],
            "repeat_penalty": 1.1,
            "mirostat_mode": 2,
        }

    def test_negative_num_predict_means_no_limit(self) -> None:
        assert sampling({"num_predict": -1}, None) == {}

    def test_num_ctx_bounds_the_answer_within_the_loaded_context(self) -> None:
        assert sampling({"num_ctx": 4096}, n_ctx=256) == {"max_tokens": 256}  # more than loaded: the loaded one
        assert sampling({"num_ctx": 64, "num_predict": 100}, n_ctx=256) == {"max_tokens": 64}
        assert sampling({"num_predict": 10, "num_ctx": 64}, n_ctx=256) == {"max_tokens": 10}
        assert sampling({"num_ctx": 64}, n_ctx=None) == {"max_tokens": 64}

    @pytest.mark.parametrize(
        ("options", "message"),
        [
            ({"temperature": "hot"}, "options.temperature must be a number"),
            ({"top_k": 1.5}, "options.top_k must be an integer"),
            ({"stop": [1]}, "options.stop must be a string"),
            ({"num_ctx": 0}, "options.num_ctx must be a positive"),
            ({"warp": 9}, "options.warp is not an option"),
        ],
    )
    def test_bad_options_name_the_option(self, options: dict[str, object], message: str) -> None:
        with pytest.raises(InvalidRequest, match=message):
            sampling(options, None)


class TestFormat:
    def test_json_and_schema(self) -> None:
        schema = {"type": "object", "properties": {"age": {"type": "integer"}}}
        assert response_format("json") == {"type": "json_object"}
        assert response_format(schema) == {"type": "json_schema", "json_schema": {"name": "format", "schema": schema}}
        assert response_format("") is None and response_format(None) is None

    def test_other_formats_are_refused(self) -> None:
        with pytest.raises(InvalidRequest, match="format"):
            response_format("yaml")


def _ready(keep_alive: float | None, ttl: float | None = None) -> ModelState:
    inst = Instance("i1", status=InstanceStatus.READY, ready_at=T0, keep_alive=keep_alive)
    return ModelState("m", available=True, instance=inst, last_used=T0, config=ModelConfig(ttl_seconds=ttl))


class TestIdleLimit:
    def test_keep_alive_wins_over_the_ttl(self) -> None:
        assert idle_limit(_ready(None, ttl=60)) == 60
        assert idle_limit(_ready(5, ttl=60)) == 5
        assert idle_limit(_ready(FOREVER, ttl=60)) is None
        assert idle_limit(_ready(None, ttl=0)) is None  # a ttl of 0 means no ttl, as before

    def test_keep_alive_zero_expires_once_idle_with_its_own_reason(self) -> None:
        model = _ready(0.0)
        state = RouterState(models={"m": model})
        assert idle_expired(state, {"m": 1}, T0) == []  # a request in flight keeps it
        assert idle_expired(state, {}, T0) == [model]
        assert model.instance is not None and idle_reason(model.instance) == "keep_alive"

    def test_forever_never_expires(self) -> None:
        state = RouterState(models={"m": _ready(FOREVER, ttl=1)})
        assert idle_expired(state, {}, T0 + timedelta(days=3650)) == []

    def test_the_fold_keeps_the_last_requests_keep_alive_on_the_instance(self) -> None:
        state = RouterState(models={"m": _ready(None)})
        done = ev.RequestCompleted(instance_id="i1", route="/api/chat", status_code=200, duration_ms=1.0, keep_alive=30)
        state = fold(state, ev.Recorded(1, "e1", "m", done, {}, T0))
        inst = state.models["m"].instance
        assert inst is not None and inst.keep_alive == 30 and idle_reason(inst) == "keep_alive"
        plain = ev.RequestCompleted(instance_id="i1", route="/v1/chat/completions", status_code=200, duration_ms=1.0)
        state = fold(state, ev.Recorded(2, "e2", "m", plain, {}, T0))
        assert state.models["m"].instance.keep_alive == 30  # type: ignore[union-attr]  # an OpenAI request keeps it
