"""Preset files in llama.cpp's format, and how a model's options merge. Pure: no fixtures."""

from __future__ import annotations

import pytest

from service.core.state import ModelConfig
from service.llamacpp.options import OptionError, command_line, merge, model_settings, model_tags, preset_ini
from service.llamacpp.presets import PresetError, canonical_section_name, parse_preset

README_EXAMPLE = """
version = 1

; global settings
[*]
c = 8192
n-gpu-layers = 8

[ggml-org/MY-MODEL-GGUF:q8_0]
chat-template = chatml
n-gpu-layers = 123
jinja = true
c = 4096
LLAMA_ARG_CACHE_RAM = 0
model-draft = /Users/abc/my-models/draft.gguf

[custom_model]
model = /Users/abc/my-awesome-model-Q4_K_M.gguf
"""


def _config(
    text: str, section: str, *, env: dict[str, str] | None = None, cli: dict[str, str] | None = None
) -> ModelConfig:
    preset = parse_preset(text, "test.ini")
    found = next(s for s in preset.sections if s.name == section)
    options = merge([env or {}, preset.defaults.options, found.options, cli or {}])
    return model_settings(options, {**preset.defaults.extras, **found.extras}).config


class TestParsing:
    def test_llama_cpps_readme_example_parses(self) -> None:
        preset = parse_preset(README_EXAMPLE, "my-models.ini")
        assert preset.defaults.options == {"ctx-size": "8192", "n-gpu-layers": "8"}
        assert [s.name for s in preset.sections] == ["ggml-org/MY-MODEL-GGUF:Q8_0", "custom_model"]
        model = preset.sections[0].options
        assert model["chat-template"] == "chatml" and model["cache-ram"] == "0" and model["ctx-size"] == "4096"
        assert model["model-draft"] == "/Users/abc/my-models/draft.gguf"

    def test_values_end_at_a_comment_and_negations_resolve(self) -> None:
        preset = parse_preset("[m]\nno-jinja = true # off\nLLAMA_ARG_NO_CONT_BATCHING = 1\nchat-template = a;b\n", "x")
        assert preset.sections[0].options == {"jinja": "0", "cont-batching": "0", "chat-template": "a"}

    def test_a_section_opened_twice_starts_over(self) -> None:
        preset = parse_preset("[m]\nc = 1\n[m]\nb = 2\n", "x")
        assert preset.sections[0].options == {"batch-size": "2"}

    def test_an_unknown_key_names_the_file_the_section_and_the_key(self) -> None:
        with pytest.raises(PresetError, match=r"my\.ini: \[tiny\] n_gpu_layerz: unknown key"):
            parse_preset("[tiny]\nn_gpu_layerz = 3\n", "my.ini")

    def test_a_malformed_line_names_the_line(self) -> None:
        with pytest.raises(PresetError, match=r"x:2:"):
            parse_preset("[m]\nthis is not ini\n", "x")

    def test_canonical_section_names_upper_case_the_tag(self) -> None:
        assert canonical_section_name("u/r:q4_k_m") == "u/r:Q4_K_M"
        assert canonical_section_name("u/r:model-q8_0") == "u/r:Q8_0"
        assert canonical_section_name("*") == "*" and canonical_section_name("plain") == "plain"

    def test_remote_presets_accept_only_llama_cpps_whitelist(self) -> None:
        allowed = "[m]\nhf-repo = u/r:Q4_K_M\ntemp = 0.2\nbatch-size = 64\njinja = true\nmmap = false\n"
        assert parse_preset(allowed, "remote", remote=True).sections[0].options["hf-repo"] == "u/r:Q4_K_M"
        for key in ("model = /etc/passwd", "api-key = x", "ttl = 3", "load-on-startup = true"):
            with pytest.raises(PresetError, match="not allowed in remote presets"):
                parse_preset(f"[m]\n{key}\n", "remote", remote=True)


class TestSettings:
    def test_precedence_env_then_global_then_section_then_command_line(self) -> None:
        text = "[*]\nc = 100\nb = 100\nt = 100\n[m]\nb = 200\nt = 200\n"
        config = _config(
            text, "m", env={"ctx-size": "1", "batch-size": "1", "threads": "1", "seed": "1"}, cli={"threads": "300"}
        )
        assert config.params == {"n_ctx": 100, "n_batch": 200, "n_threads": 300, "seed": 1}

    def test_options_the_worker_cannot_honour_are_recorded_as_ignored(self) -> None:
        config = _config("[m]\ncmoe = 1\nngl = 99\ntemp = 0.1\nno-cont-batching = 1\nc = 64\n", "m")
        # every request's default; -ngl is honoured (the offload rows)
        assert config.params == {"n_ctx": 64, "n_gpu_layers": "99", "sampling": {"temperature": 0.1}}
        assert config.ignored == ("cont-batching", "cpu-moe")
        assert config.args["cpu-moe"] == "1", "the options in force are recorded as given"

    def test_chat_template_options_reach_the_worker(self) -> None:
        """--no-jinja, an inline template, a template file, kwargs and reasoning-format are honoured;
        a kwargs value that is no JSON object is refused, as llama-server refuses to start."""
        text = "[m]\nno-jinja = 1\nchat-template = {{ custom }}\nchat-template-file = /t.jinja\n"
        config = _config(text + 'chat-template-kwargs = {"thinking": true}\nreasoning-format = none\n', "m")
        assert config.params == {
            "jinja": False,
            "chat_template": "{{ custom }}",
            "chat_template_file": "/t.jinja",
            "chat_template_kwargs": '{"thinking": true}',
            "reasoning_format": "none",
        }
        assert config.ignored == ()
        assert _config("[m]\nchat-template = chatml\n", "m").params == {"chat_format": "chatml"}
        for bad in ("chat-template-kwargs = [1]", "reasoning-format = sometimes"):
            with pytest.raises(OptionError):
                _config(f"[m]\n{bad}\n", "m")

    def test_reasoning_reaches_the_worker_in_llama_cpps_words(self) -> None:
        """``reasoning`` (``-rea``, ``LLAMA_ARG_REASONING``): on or off for the worker, ``auto`` (its
        default) left out; a word llama.cpp does not know is refused in llama-server's words."""
        assert _config("[m]\nrea = false\n", "m").params == {"reasoning": "off"}
        assert _config("[m]\n", "m", env={"reasoning": "enabled"}).params == {"reasoning": "on"}
        assert _config("[m]\nreasoning = on\n", "m", cli={"reasoning": "-1"}).params == {}
        with pytest.raises(OptionError, match=r"reasoning = 'maybe': unknown value for --reasoning: 'maybe'"):
            _config("[m]\nreasoning = maybe\n", "m")

    def test_options_in_force_read_back_as_llama_servers_command_line(self) -> None:
        """``GET /models`` ``status.args``, as llama.cpp shows its child's arguments."""
        config = _config("[m]\nc = 64\nno-jinja = 1\nmlock = true\nload-on-startup = 1\nhf = u/r:Q8_0\n", "m")
        assert command_line(config.args) == ["--ctx-size", "64", "--hf-repo", "u/r:Q8_0", "--no-jinja", "--mlock"]

    def test_honoured_options_become_worker_parameters(self) -> None:
        text = "[m]\nembedding = true\nchat-template = chatml\nnp = 2\nthreads-batch = 3\nseed = 7\njinja = 1\n"
        config = _config(text, "m")
        assert config.params == {
            "embedding": True,
            "chat_format": "chatml",
            "n_parallel": 2,
            "n_threads_batch": 3,
            "seed": 7,
        }
        assert config.ignored == ()

    def test_preset_only_keys_and_ours(self) -> None:
        text = "[*]\nrestart = on-failure\n[m]\nload-on-startup = true\nstop-timeout = 5\nttl = 30\naliases = a\nalias = b, c\n"
        config = _config(text, "m")
        assert (config.load_on_startup, config.stop_timeout, config.ttl_seconds, config.restart) == (
            True,
            5.0,
            30.0,
            "on-failure",
        )
        assert config.aliases == ("b", "c", "a")
        assert "stop-timeout" not in config.ignored, "honoured: the model's SIGKILL deadline on unload"
        assert _config("[m]\nstop-timeout = soon\n", "m").stop_timeout is None, "llama.cpp keeps its default"

    @pytest.mark.parametrize(
        ("value", "loads"), [("1", True), ("on", True), ("Enabled", True), ("yes", False), ("0", False), ("", False)]
    )
    def test_load_on_startup_takes_llama_cpps_true_values_only(self, value: str, loads: bool) -> None:
        assert _config(f"[m]\nload-on-startup = {value}\n", "m").load_on_startup is loads

    def test_options_in_force_read_back_as_a_preset_section(self) -> None:
        """``status.preset``: llama.cpp's to_ini, which parses back to the same options."""
        config = _config("[*]\nc = 64\n[m]\nngl = 9\nno-jinja = 1\nalias = x\ntags = t\nload-on-startup = 1\n", "m")
        text = preset_ini("m", config.args)
        assert text == "[m]\nctx-size = 64\njinja = 0\nload-on-startup = 1\nn-gpu-layers = 9\n\n"
        assert _config(text, "m").args == {k: v for k, v in config.args.items() if k not in ("alias", "tags")}

    def test_tags_are_listed_as_llama_cpp_lists_them(self) -> None:
        config = _config("[*]\ntags = chat\n[m]\ntags = small, chat ,, big\n", "m")
        assert model_tags(config.args) == ["big", "chat", "small"] and config.ignored == ()

    def test_older_modelrouter_keys_still_work(self) -> None:
        config = _config("[m]\nn_ctx = 128\nn_threads = 2\nchat_format = chatml\n", "m")
        assert config.params == {"n_ctx": 128, "n_threads": 2, "chat_format": "chatml"}

    def test_hf_repo_is_recorded_for_a_download_on_first_use(self) -> None:
        config = _config("[m]\nhf = u/r:Q8_0\nhf-file = r-Q8_0.gguf\n", "m")
        assert (config.hf_repo, config.hf_file) == ("u/r:Q8_0", "r-Q8_0.gguf")

    def test_a_bad_value_is_refused(self) -> None:
        with pytest.raises(OptionError, match="ctx-size"):
            _config("[m]\nc = big\n", "m")
        with pytest.raises(OptionError, match="restart"):
            _config("[m]\nrestart = always\n", "m")
