"""``modelrouter serve`` with llama-server's command line and environment -> Settings."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from service.catalogue.hf_source import HfSourceError
from service.catalogue.sources import command_line_model
from service.cli import build_parser, serve_settings
from service.core.model_spec import projector_path
from service.llamacpp.command_line import normalize_argv
from service.llamacpp.router_args import UsageError, llama_cache_dir
from service.settings import Settings

ROOT = Path(__file__).resolve().parents[2]


def _settings(argv: list[str], environ: dict[str, str] | None = None) -> tuple[Settings, tuple[str, ...]]:
    args = build_parser().parse_args(normalize_argv(["serve", *argv]))
    return serve_settings(args, {"HOME": "/home/u", **(environ or {})})


class TestRouterOptions:
    def test_llama_servers_router_flags_set_the_service(self, tmp_path: Path) -> None:
        settings, _ = _settings(
            [
                "--models-dir",
                str(tmp_path),
                "--models-preset",
                "my.ini",
                "--models-max",
                "2",
                "--no-models-autoload",
                "--host",
                "0.0.0.0",
                "--port",
                "9000",
                "--offline",
            ]
        )
        assert settings.models_dir == tmp_path and settings.presets == Path("my.ini")
        assert (settings.models_max, settings.autoload, settings.host, settings.port) == (2, False, "0.0.0.0", 9000)
        assert settings.offline is True

    @pytest.mark.parametrize(
        ("argv", "environ", "why"),
        [
            (["-to", "0"], {}, "timeout .* must be a number of seconds >= 1, got 0"),
            ([], {"LLAMA_ARG_TIMEOUT": "-5"}, "timeout .* >= 1, got -5"),
            ([], {"MODELROUTER_TIMEOUT": "0.5"}, "timeout .* >= 1, got 0.5"),
            (["--hang-timeout", "-1"], {}, "hang_timeout .* must be >= 0 s, got -1"),
            ([], {"MODELROUTER_HANG_TIMEOUT": "nan"}, "hang_timeout .* got nan"),
        ],
    )
    def test_timeouts_that_would_refuse_every_body_or_silence_the_hang_watch_are_refused(
        self, argv: list[str], environ: dict[str, str], why: str
    ) -> None:
        with pytest.raises(ValueError, match=why):
            _settings(argv, environ)

    def test_single_model_flags(self) -> None:
        settings, _ = _settings(["-hf", "ggml-org/gemma-GGUF:Q4_K_M", "--hf-file", "x.gguf", "--alias", "a, b"])
        assert (settings.hf_repo, settings.hf_file, settings.aliases) == (
            "ggml-org/gemma-GGUF:Q4_K_M",
            "x.gguf",
            ("a", "b"),
        )

    def test_a_projector_beside_the_single_model(self, tmp_path: Path) -> None:
        """``-m FILE --mmproj P``: P is among the model's files (its worker gets ``--mmproj``); a projector
        not named ``mmproj*`` (how a model's files tell it from the model) is refused at start. (The test's
        name avoids "mmproj": ``projector_path`` and the fold's ``primary_path`` look at the whole path.)"""
        (tmp_path / "m.gguf").write_bytes(b"GGUF")
        (tmp_path / "mmproj-m.gguf").write_bytes(b"GGUF")
        (tmp_path / "vision.gguf").write_bytes(b"GGUF")
        settings, warnings = _settings(["-m", str(tmp_path / "m.gguf"), "--mmproj", str(tmp_path / "mmproj-m.gguf")])
        assert settings.mmproj_file == tmp_path / "mmproj-m.gguf" and not warnings
        _, single = command_line_model(settings)
        assert single is not None and projector_path(single.files) == str(tmp_path / "mmproj-m.gguf")
        settings, _ = _settings(["-m", str(tmp_path / "m.gguf"), "--mmproj", str(tmp_path / "vision.gguf")])
        with pytest.raises(HfSourceError, match="mmproj"):
            command_line_model(settings)

    def test_api_keys_add_up_from_flags_file_and_environment(self, tmp_path: Path) -> None:
        keys = tmp_path / "keys"
        keys.write_text("# team keys\nfile-key\n\n")
        settings, _ = _settings(
            ["--api-key", "key-one", "--api-key", "two,three", "--api-key-file", str(keys)],
            {"LLAMA_API_KEY": "env-key"},
        )
        assert set(settings.api_keys) == {"key-one", "two", "three", "file-key", "env-key"}
        assert "key-one" not in repr(settings) and "key-one" in settings.secrets()

    def test_an_unreadable_key_file_is_a_usage_error(self, tmp_path: Path) -> None:
        with pytest.raises(UsageError, match="api-key-file"):
            _settings(["--api-key-file", str(tmp_path / "missing")])

    def test_underscores_in_long_options_read_as_dashes(self) -> None:
        settings, _ = _settings(["--models_max", "3", "--ctx_size", "512"])
        assert settings.models_max == 3 and settings.model_args == {"ctx-size": "512"}

    def test_a_slot_save_path_must_be_a_directory(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """As llama-server's start-up check: a path that is no directory is a usage error."""
        assert _settings(["--slot-save-path", str(tmp_path)])[0].model_args == {"slot-save-path": str(tmp_path)}
        (tmp_path / "file").write_text("")
        for path in (tmp_path / "missing", tmp_path / "file"):
            with pytest.raises(SystemExit) as usage:
                _settings(["--slot-save-path", str(path)])
            assert usage.value.code == 2 and f"not a directory: {path}" in capsys.readouterr().err

    def test_router_options_ignored_by_modelrouter_are_warned_about(self) -> None:
        _, warnings = _settings(["--threads-http", "8", "--no-webui"])
        assert any("--threads-http" in w for w in warnings) and any("--webui" in w for w in warnings)


class TestPrecedence:
    def test_command_line_beats_modelrouter_variables_which_beat_llama_cpps(self) -> None:
        both = {"LLAMA_ARG_PORT": "1111", "MODELROUTER_PORT": "2222", "LLAMA_ARG_MODELS_MAX": "7"}
        assert _settings([], both)[0].port == 2222
        assert _settings([], both)[0].models_max == 7  # no MODELROUTER_MODELS_MAX: llama.cpp's variable
        assert _settings(["--port", "3333"], both)[0].port == 3333

    def test_llama_cpp_negated_variables_turn_booleans_off(self) -> None:
        assert _settings([], {"LLAMA_ARG_NO_MODELS_AUTOLOAD": "1"})[0].autoload is False

    def test_per_model_options_from_env_and_command_line_are_separate_layers(self) -> None:
        settings, _ = _settings(["-c", "4096", "-ngl", "99"], {"LLAMA_ARG_CTX_SIZE": "512", "LLAMA_ARG_BATCH": "64"})
        assert settings.model_args == {"ctx-size": "4096", "n-gpu-layers": "99"}
        assert settings.model_env_args == {"ctx-size": "512", "batch-size": "64"}

    def test_hub_endpoint_token_cache_and_offline_variables(self) -> None:
        environ = {
            "MODEL_ENDPOINT": "http://mirror/",
            "HF_ENDPOINT": "http://other",
            "HF_TOKEN": "hf_x",
            "LLAMA_CACHE": "/llama/cache",
            "HF_HUB_OFFLINE": "1",
        }
        settings, _ = _settings([], environ)
        assert settings.hf_endpoint == "http://mirror" and settings.hf_token == "hf_x"
        assert settings.hub_cache == Path("/llama/cache") == settings.llama_cache, "downloads land in LLAMA_CACHE"
        assert settings.offline is True
        assert _settings(["--hub-cache", "/ours"], environ)[0].hub_cache == Path("/ours")


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({"LLAMA_CACHE": "/a", "HF_HUB_CACHE": "/b"}, "/a"),
        ({"HF_HUB_CACHE": "/b", "HUGGINGFACE_HUB_CACHE": "/c"}, "/b"),
        ({"HUGGINGFACE_HUB_CACHE": "/c", "HF_HOME": "/d"}, "/c"),
        ({"HF_HOME": "/d", "XDG_CACHE_HOME": "/e"}, "/d/hub"),
        ({"XDG_CACHE_HOME": "/e", "HOME": "/f"}, "/e/huggingface/hub"),
        ({"HOME": "/f"}, "/f/.cache/huggingface/hub"),
    ],
)
def test_llama_cpp_cache_directory_order(environ: dict[str, str], expected: str) -> None:
    """As common/hf-cache.cpp's get_cache_directory()."""
    assert llama_cache_dir(environ) == Path(expected)


def _serve(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "service.cli", "serve", *argv], capture_output=True, text=True, cwd=ROOT, timeout=60
    )


def test_a_flag_llama_server_does_not_know_is_a_usage_error() -> None:
    result = _serve("--models-dir", "/tmp", "--no-such-flag")
    assert result.returncode == 2 and "--no-such-flag" in result.stderr


def test_a_bad_value_is_a_usage_error() -> None:
    result = _serve("-c", "lots")
    assert result.returncode == 2 and "invalid" in result.stderr


@pytest.mark.parametrize(
    ("argv", "environ", "words"),
    [
        (["--draft-max", "8"], {}, "draft-max: the argument has been removed. use --spec-draft-n-max"),
        (["--spec-ngram-size-n", "4"], {}, "the argument has been removed. use the respective --spec-ngram-*-size-n"),
        ([], {"LLAMA_ARG_DRAFT_MIN": "2"}, "draft-n-min: the argument has been removed. use --spec-draft-n-min"),
        (["--spec-type", "ngram-fancy"], {}, "unknown speculative type: ngram-fancy"),
        (["--spec-ngram-mod-n-max", "2000"], {}, "invalid value for --spec-ngram-mod-n-max: '2000'"),
    ],
)
def test_an_option_llama_server_refuses_at_start_is_a_usage_error_in_its_words(
    argv: list[str], environ: dict[str, str], words: str, tmp_path: Path
) -> None:
    """Options llama.cpp removed (its ``arg_removed``), and values it refuses, stop ``serve`` before it
    opens the log or binds, with one line on stderr, wherever they are given; no traceback."""
    result = subprocess.run(
        [sys.executable, "-m", "service.cli", "serve", "--home", str(tmp_path), "--port", "1", *argv],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        env={**os.environ, **environ},
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("modelrouter serve: error: ") and words in result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "modelrouter.db").exists()


def test_version_and_cache_list(tmp_path: Path) -> None:
    assert _serve("--version").stdout.startswith("modelrouter ")
    listed = _serve("--cache-list", "--home", str(tmp_path))
    assert listed.returncode == 0 and "number of models in cache: 0" in listed.stdout


def test_list_devices_prints_llama_servers_listing_and_exits(tmp_path: Path) -> None:
    """llama-server's ``--list-devices`` (common_print_available_devices): on this CPU build no device
    but the CPU, which it does not list. Printed by the worker's libraries in a child process."""
    from workers.inference.llama import supports_gpu_offload

    listed = _serve("--list-devices", "--home", str(tmp_path), "--port", "1")  # never binds: it exits first
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.startswith("Available devices:\n")
    if not supports_gpu_offload():
        assert listed.stdout == "Available devices:\n  (none)\n"
    assert not (tmp_path / "modelrouter.db").exists(), "no log opened"
