"""The flag table: generated from llama.cpp's arg.cpp, complete, and in step with the help and the docs."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from devtools import extract_llama_args, llama_build
from service.llamacpp.flags import ARGS, BY_NAME, handling, lookup
from service.llamacpp.upstream_args import LLAMA_ARGS

ROOT = Path(__file__).resolve().parents[2]

# The flags issue 8 §1 names, each as llama-server spells it.
ROUTER_FLAGS = [
    "--models-dir",
    "--models-preset",
    "--models-max",
    "--models-autoload",
    "--no-models-autoload",
    "-hf",
    "--hf-repo",
    "--hf-file",
    "--api-key",
    "--api-key-file",
    "--offline",
    "--host",
    "--port",
    "--alias",
]
MODEL_FLAGS = [
    "-c",
    "--ctx-size",
    "-b",
    "--batch-size",
    "-ub",
    "--ubatch-size",
    "-t",
    "--threads",
    "-tb",
    "-ngl",
    "--n-gpu-layers",
    "-np",
    "--parallel",
    "-n",
    "--n-predict",
    "--temp",
    "--seed",
    "--jinja",
    "--no-jinja",
    "--chat-template",
    "--chat-template-file",
    "--embedding",
    "--pooling",
    "-fa",
    "-ctk",
    "-ctv",
    "--mlock",
    "--no-mmap",
    "--cont-batching",
    "--slots",
    "--no-slots",
    "--metrics",
    "--no-webui",
    "--verbose",
]


def _all_spellings() -> set[str]:
    return {name for arg in ARGS for name in (*arg.names, *arg.negations) if not arg.preset_only}


def test_the_committed_table_is_what_the_extractor_reads_from_llama_cpp() -> None:
    """``service/llamacpp/upstream_args.py`` is generated; a hand edit or a llama.cpp update shows here. The sources
    are the pinned llama-cpp-python sdist's (from the package index, cached by devtools.llama_build)."""
    source = llama_build.vendored_llama_cpp()
    assert extract_llama_args.main(["--check", "--source", str(source)]) == 0


def test_the_extractor_reads_names_kinds_envs_and_examples() -> None:
    cpp = """
    common_params_context common_params_parser_init(common_params & params, llama_example ex, void(*u)(int, char **)) {
        add_opt(common_arg({"-x", "--ex-ample"}, "N", string_format("an int (default: %d)", 3),
            [](common_params & params, int value) { params.x = value; }  // a comment with "quotes" (
        ).set_env("LLAMA_ARG_X").set_examples({LLAMA_EXAMPLE_SERVER}));
        add_opt(common_arg({"--on"}, {"--no-on"}, "a bool",
            [](common_params & params, bool value) { params.on = value; }));
        add_opt(common_arg({"--cli-only"}, "a flag", [](common_params & params) { params.c = ')'; }
        ).set_examples({LLAMA_EXAMPLE_CLI}));
        add_opt(common_arg({"--not-here"}, "F", "excluded", [](common_params & p, const std::string & v) {}
        ).set_excludes({LLAMA_EXAMPLE_SERVER}));
    }
    void common_params_add_preset_options(std::vector<common_arg> & args) {
        args.push_back(common_arg({"stop-timeout"}, "SECONDS", "preset only", [](common_params &, int) {}
        ).set_env(COMMON_ARG_PRESET_STOP_TIMEOUT).set_preset_only());
        // args.push_back(common_arg({"pin"}, "commented out", [](common_params &) {}).set_preset_only());
    }
    """
    found = {o.names: o for o in extract_llama_args.extract(cpp)}
    assert set(found) == {("-x", "--ex-ample"), ("--on",), ("stop-timeout",)}
    example = found[("-x", "--ex-ample")]
    assert (example.kind, example.env, example.help) == ("int", "LLAMA_ARG_X", "an int (default: …)")
    assert found[("--on",)].kind == "bool" and found[("--on",)].negations == ("--no-on",)
    assert found[("stop-timeout",)].preset_only and found[("stop-timeout",)].env == "__PRESET_STOP_TIMEOUT"


def test_every_flag_the_issue_names_is_accepted() -> None:
    spellings = _all_spellings()
    missing = [flag for flag in ROUTER_FLAGS + MODEL_FLAGS if flag not in spellings]
    assert not missing


def test_the_table_is_llama_servers_own_list() -> None:
    """No option of another llama.cpp tool leaks in, and the server's own are there."""
    keys = {arg.key for arg in LLAMA_ARGS}
    assert {"models-max", "api-key", "ctx-size", "n-gpu-layers", "load-on-startup"} <= keys
    assert not keys & {"prompt", "file", "binary-file", "interactive"}  # excluded from the server / CLI-only
    assert len(LLAMA_ARGS) == len({arg.names for arg in LLAMA_ARGS})


def test_every_decision_names_a_real_option() -> None:
    """A typo in flags.py's tables would silently make an option 'ignored'."""
    honoured = {arg.key for arg in ARGS if handling(arg).honoured}
    assert {
        "ctx-size",
        "threads",
        "threads-batch",
        "batch-size",
        "seed",
        "embeddings",
        "parallel",
        "port",
        "host",
        "api-key",
        "api-key-file",
        "models-dir",
        "models-preset",
        "models-max",
        "models-autoload",
        "hf-repo",
        "hf-file",
        "alias",
        "model",
        "offline",
        "load-on-startup",
        "dedup-cache-models",
        "metrics",
        "slots",
        "sleep-idle-seconds",
        "cors-origins",
        "cors-methods",
        "cors-headers",
        "cors-credentials",
        "n-gpu-layers",
        "split-mode",
        "tensor-split",
        "main-gpu",
        "device",
        "kv-offload",
        "op-offload",
        "mmproj-offload",
        "fit",
        "fit-target",
        "fit-ctx",
    } <= honoured
    params = {handling(arg).param for arg in ARGS if handling(arg).param}
    sampling = {p for p in params if p is not None and p.startswith("sampling.")}
    assert {"sampling.temperature", "sampling.top_k", "sampling.n_predict", "sampling.grammar_file"} <= sampling
    assert params - sampling == {
        "n_gpu_layers",
        "split_mode",
        "tensor_split",
        "main_gpu",
        "device",
        "op_offload",
        "mmproj_offload",
        "fit",
        "fit_target",
        "fit_ctx",
        "n_ctx",
        "n_threads",
        "n_threads_batch",
        "n_batch",
        "seed",
        "embedding",
        "n_parallel",
        "chat_format",
        "pooling",
        "kv_unified",
        "context_shift",
        "spm_infill",
        "slot_save_path",
        "lora",
        "lora_scaled",
        "lora_init_without_apply",
        "endpoint_props",
        "endpoint_metrics",
        "endpoint_slots",
        "chat_template_file",
        "chat_template_kwargs",
        "prefill_assistant",
        "reasoning_format",
        "reasoning",
        "jinja",
        "video_fps",
        "video_timestamp_interval",
        "video_ffmpeg_dir",
        "cache_ram",
        "cache_idle_slots",
        "n_ubatch",
        "flash_attn",
        "cache_type_k",
        "cache_type_v",
        "swa_full",
        "warmup",
        "rope_scaling",
        "rope_freq_base",
        "rope_freq_scale",
        "yarn_orig_ctx",
        "yarn_ext_factor",
        "yarn_attn_factor",
        "yarn_beta_slow",
        "yarn_beta_fast",
        "load_mode",
        "lazy_mode",
        "repack",
        "no_host",
        "check_tensors",
        "mlock",
        "mmap",
        "log_prompts_dir",
        "kv_offload",
        "verbose",
        "spec_type",
        "spec_ngram_simple_size_n",
        "spec_ngram_simple_size_m",
        "spec_ngram_simple_min_hits",
        "spec_ngram_map_k_size_n",
        "spec_ngram_map_k_size_m",
        "spec_ngram_map_k_min_hits",
        "spec_ngram_map_k4v_size_n",
        "spec_ngram_map_k4v_size_m",
        "spec_ngram_map_k4v_min_hits",
        "spec_ngram_mod_n_min",
        "spec_ngram_mod_n_max",
        "spec_ngram_mod_n_match",
        "lookup_cache_static",
        "lookup_cache_dynamic",
        "spec_draft_model",
        "spec_draft_n_max",
        "spec_draft_n_min",
        "spec_draft_p_min",
        "spec_draft_threads",
        "spec_draft_threads_batch",
        "spec_draft_type_k",
        "spec_draft_type_v",
        "spec_draft_ngl",
        "spec_draft_device",
        "spec_synth_len",
        "spec_synth_rates",
    }


@pytest.mark.parametrize(
    "spelling", ["no-kv-offload = 1", "nkvo = true", "kv-offload = off", "LLAMA_ARG_NO_KV_OFFLOAD = 1"]
)
def test_no_kv_offload_reaches_llama_context_params(tmp_path: Path, spelling: str) -> None:
    """llama-server's ``-nkvo`` (a preset's key, its short name, its falsey value or its env name) is no
    longer ignored: it becomes the worker's ``--no-kv-offload`` and llama.cpp's ``offload_kqv`` false.
    A CPU build has nothing to offload, so what can be checked is that the value reaches llama.cpp."""
    pytest.importorskip("llama_cpp")
    from service.llamacpp.options import model_settings
    from service.llamacpp.presets import parse_preset
    from service.settings import Settings
    from service.supervision.worker_args import inference_argv
    from workers.inference._cli import parse_args
    from workers.inference._engine_setup import context_config
    from workers.inference.llama._bindings import lowlevel
    from workers.inference.llama._load import _context_params

    settings = Settings.from_env({"MODELROUTER_HOME": str(tmp_path)})
    off, on = parse_preset(f"[off]\nmodel = /m/m.gguf\n{spelling}\n[on]\nmodel = /m/m.gguf\n", "t.ini").sections
    config = model_settings(off.options, off.extras).config
    assert "kv-offload" not in config.ignored and config.params == {"kv_offload": False}
    argv = inference_argv(settings, "m", "/m/m.gguf", "m-1", 9000, dict(config.params))
    assert "--no-kv-offload" in argv
    assert _context_params(lowlevel(), context_config(parse_args(argv[3:])), 8192).offload_kqv is False
    plain = inference_argv(settings, "m", "/m/m.gguf", "m-1", 9000, dict(model_settings(on.options, {}).config.params))
    assert "--no-kv-offload" not in plain
    assert _context_params(lowlevel(), context_config(parse_args(plain[3:])), 8192).offload_kqv is True


def test_preset_keys_are_long_and_short_names_and_env_names() -> None:
    assert lookup("c") == lookup("ctx-size") == lookup("LLAMA_ARG_CTX_SIZE") == (BY_NAME["ctx-size"], False)
    assert lookup("no-jinja") == (BY_NAME["jinja"], True)
    assert lookup("LLAMA_ARG_NO_JINJA") == (BY_NAME["jinja"], True)
    assert lookup("no-such-option") is None


def _help() -> str:
    result = subprocess.run(
        [sys.executable, "-m", "service.cli", "serve", "--help"], capture_output=True, text=True, check=True, cwd=ROOT
    )
    return result.stdout


def test_serve_help_lists_every_flag_grouped() -> None:
    """``serve --help`` keeps in step with the table: every spelling but the hidden ``--no-X`` twins."""
    text = _help()
    shown = set(re.findall(r"(?<![\w-])(--?[A-Za-z][\w.-]*)", text))
    expected = {name for arg in ARGS if not arg.preset_only for name in arg.names}
    assert expected <= shown, sorted(expected - shown)
    titles = ["llama-server: router:", "llama-server: per-model defaults:", "modelrouter:"]
    positions = [text.index(title) for title in titles]
    assert positions == sorted(positions)
    router = text[positions[0] : positions[1]]
    assert "--models-max" in router and "--api-key" in router and "--ctx-size" not in router


def test_the_compat_doc_lists_every_option_and_its_handling() -> None:
    """docs/llama-cpp-compat.md's tables are generated by devtools.compat_doc; they must be current."""
    from devtools import compat_doc

    doc = (ROOT / "docs" / "llama-cpp-compat.md").read_text()
    assert compat_doc.splice(doc) == doc, "run python -m devtools.compat_doc"
    for arg in ARGS:
        assert f"`{arg.names[-1]}`" in doc, arg.key


def _help_entries(text: str) -> list[tuple[frozenset[str], bool]]:
    """``(spellings, ignored)`` of every option ``serve --help`` shows in its llama-server groups."""
    llama = text[text.index("llama-server: router:") : text.index("\nmodelrouter:")]
    entries: list[tuple[frozenset[str], bool]] = []
    for block in re.split(r"\n(?=  -)", llama)[1:]:
        header = re.split(r"\s{2,}", block.strip(), maxsplit=1)[0]
        names = frozenset(re.findall(r"(?:^|, )(--?[A-Za-z][\w.-]*)", header))
        entries.append((names, "(ignored: " in " ".join(block.split())))
    return entries


def _doc_rows(doc: str) -> list[tuple[frozenset[str], bool]]:
    """``(spellings, ignored)`` of every option row of the compat doc (preset-only keys aside)."""
    options = doc[doc.index("## Options") : doc.index("### Preset-only keys")]
    rows = []
    for line in options.splitlines():
        cells = [c.strip() for c in line.split("|")[1:-1]]
        if len(cells) == 4 and cells[0].startswith("`-"):
            rows.append((frozenset(re.findall(r"`(-[^`]+)`", cells[0])), cells[2] == "accepted, ignored"))
    return rows


def test_the_compat_doc_and_serve_help_list_the_same_options_with_the_same_verdict() -> None:
    """What a user reads in docs/llama-cpp-compat.md is what ``modelrouter serve --help`` says:
    the same options, each supported or ignored in both (the help hides ``--no-X`` twins)."""
    shown = _help_entries(_help())
    documented = _doc_rows((ROOT / "docs" / "llama-cpp-compat.md").read_text())
    assert len(shown) == len(documented) > 200
    by_name = {name: entry for entry in shown for name in entry[0]}
    for names, ignored in documented:
        visible = {n for n in names if n in by_name}
        assert visible, f"{sorted(names)} is documented but not in serve --help"
        (entry,) = {by_name[n] for n in visible}
        assert names >= entry[0], f"serve --help shows {sorted(entry[0] - names)} the doc does not"
        assert entry[1] == ignored, f"{sorted(names)}: the doc and serve --help disagree on whether it is honoured"
