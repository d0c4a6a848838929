"""Per-model parameters reach the inference worker's command line (presets → flags)."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.llamacpp.options import model_settings
from service.llamacpp.presets import parse_preset
from service.settings import Settings
from service.supervision.worker_args import inference_argv


def test_engine_parameters_from_a_preset_become_worker_flags(tmp_path: Path) -> None:
    text = "[tiny]\nmodel = /m/tiny.gguf\nn_parallel = 2\nmax_prompt_tokens = 1000\nn_batch = 64\n"
    [section] = parse_preset(text, "test.ini").sections
    params = dict(model_settings(section.options, section.extras).config.params)
    assert params == {"n_parallel": 2, "max_prompt_tokens": 1000, "n_batch": 64}
    settings = Settings.from_env({"MODELROUTER_HOME": str(tmp_path)})
    argv = inference_argv(settings, "tiny", "/m/tiny.gguf", "tiny-1", 9000, params)
    flags = dict(zip(argv[3::2], argv[4::2], strict=False))
    assert flags["--n-parallel"] == "2" and flags["--max-prompt-tokens"] == "1000" and flags["--n-batch"] == "64"


def test_llama_server_generation_switches_reach_the_worker(tmp_path: Path) -> None:
    """A preset's ``context-shift``, ``spm-infill``, ``slot-save-path``, ``reranking`` and
    ``kv-unified`` become the worker's llama-server flags; their falsey forms add nothing."""
    text = (
        "[tiny]\nmodel = /m/tiny.gguf\ncontext-shift = true\nspm-infill = 1\nslot-save-path = /tmp/slots \n"
        "reranking = on\nkv-unified = true\nlora = /a.gguf,/b.gguf\nlora-scaled = /c.gguf:0.5\nprops = on\n"
        "lora-init-without-apply = true\n[off]\nmodel = /m/off.gguf\ncontext-shift = false\nkv-unified = 0\n"
    )
    on, off = parse_preset(text, "test.ini").sections
    settings = Settings.from_env({"MODELROUTER_HOME": str(tmp_path)})
    params = dict(model_settings(on.options, on.extras).config.params)
    argv = inference_argv(settings, "tiny", "/m/tiny.gguf", "tiny-1", 9000, params)
    assert {"--context-shift", "--spm-infill", "--kv-unified", "--embedding", "--props"} <= set(argv)
    assert "--lora-init-without-apply" in argv and argv[argv.index("--lora") + 1] == "/a.gguf,/b.gguf"
    assert argv[argv.index("--lora-scaled") + 1] == "/c.gguf:0.5"
    assert argv[argv.index("--slot-save-path") + 1] == "/tmp/slots" and argv[argv.index("--pooling") + 1] == "rank"
    params = dict(model_settings(off.options, off.extras).config.params)
    argv = inference_argv(settings, "off", "/m/off.gguf", "off-1", 9000, params)
    assert not {"--context-shift", "--kv-unified", "--spm-infill", "--slot-save-path"} & set(argv)


def test_chat_template_options_and_the_projector_parse_as_the_worker_reads_them(tmp_path: Path) -> None:
    """Every flag the service writes is one the worker's own parser takes, with the same value."""
    from workers.inference._cli import parse_args

    text = (
        "[tiny]\nmodel = /m/tiny.gguf\nno-jinja = 1\nchat-template = {{ messages }}\n"
        'chat-template-file = /t.jinja\nchat-template-kwargs = {"a": 1}\nreasoning-format = none\n'
    )
    [section] = parse_preset(text, "test.ini").sections
    params = dict(model_settings(section.options, section.extras).config.params)
    settings = Settings.from_env({"MODELROUTER_HOME": str(tmp_path)})
    argv = inference_argv(settings, "tiny", "/m/tiny.gguf", "tiny-1", 9000, params, mmproj="/m/mmproj-F16.gguf")
    args = parse_args(argv[3:])
    assert (args.jinja, args.chat_template, args.chat_template_file) == (False, "{{ messages }}", "/t.jinja")
    assert (args.chat_template_kwargs, args.reasoning_format) == ('{"a": 1}', "none")
    assert args.mmproj == "/m/mmproj-F16.gguf"


def test_video_options_reach_the_worker_as_it_reads_them(tmp_path: Path) -> None:
    """llama-server's ``--video-fps``, ``--video-timestamp-interval`` and ``--video-ffmpeg-dir`` (a preset's
    keys, or their ``LLAMA_ARG_*`` names) become the worker's own flags; a value llama-server's parser
    refuses is refused naming the option; without them the worker has llama.cpp's defaults."""
    from service.llamacpp.options import OptionError
    from workers.inference._cli import parse_args

    text = (
        "[tiny]\nmodel = /m/tiny.gguf\nvideo-fps = 1.5\nLLAMA_ARG_VIDEO_TIMESTAMP_INTERVAL = 250\n"
        "video-ffmpeg-dir = /opt/ffmpeg/bin\n"
    )
    [section] = parse_preset(text, "test.ini").sections
    params = dict(model_settings(section.options, section.extras).config.params)
    assert params == {"video_fps": 1.5, "video_timestamp_interval": 250, "video_ffmpeg_dir": "/opt/ffmpeg/bin"}
    settings = Settings.from_env({"MODELROUTER_HOME": str(tmp_path)})
    args = parse_args(inference_argv(settings, "tiny", "/m/tiny.gguf", "tiny-1", 9000, params)[3:])
    assert (args.video_fps, args.video_timestamp_interval, args.video_ffmpeg_dir) == (1.5, 250, "/opt/ffmpeg/bin")
    plain = parse_args(inference_argv(settings, "t", "/m/t.gguf", "t-1", 9000, {})[3:])
    assert (plain.video_fps, plain.video_timestamp_interval, plain.video_ffmpeg_dir) == (4.0, 5000, None)
    for bad in ("video-fps = fast", "video-fps = nan", "video-timestamp-interval = 0.5"):
        [section] = parse_preset(f"[m]\nmodel = /m/m.gguf\n{bad}\n", "test.ini").sections
        with pytest.raises(OptionError, match=bad.split(" ")[0]):
            model_settings(section.options, section.extras)


def test_sampling_options_become_every_requests_defaults(tmp_path: Path) -> None:
    """llama-server's sampling options (``--temp``, ``-n``, ``--samplers``, ``-l``...) reach the worker as
    one JSON object of the request fields they default; a bad value is refused naming the option."""
    import json

    from service.llamacpp.options import OptionError

    text = (
        "[tiny]\nmodel = /m/tiny.gguf\ntemp = 0.25\ntop-k = 7\nn-predict = 12\nmirostat-ent = 4.5\n"
        "sampler-seq = kt\nlogit-bias = 15+1.5,16-inf\ndry-sequence-breaker = none\n"
        'ignore-eos = true\njson-schema = {"type": "object"}\nkeep = -1\ncache-reuse = 256\n'
    )
    [section] = parse_preset(text, "test.ini").sections
    config = model_settings(section.options, section.extras).config
    assert "temperature" not in config.ignored and "top-k" not in config.ignored
    settings = Settings.from_env({"MODELROUTER_HOME": str(tmp_path)})
    argv = inference_argv(settings, "tiny", "/m/tiny.gguf", "tiny-1", 9000, dict(config.params))
    assert json.loads(argv[argv.index("--sampling-defaults") + 1]) == {
        "temperature": 0.25,
        "top_k": 7,
        "n_predict": 12,
        "mirostat_tau": 4.5,
        "samplers": "kt",
        "logit_bias": [[15, 1.5], [16, float("-inf")]],
        "dry_sequence_breakers": [],
        "ignore_eos": True,
        "json_schema": {"type": "object"},
        "n_keep": -1,
        "n_cache_reuse": 256,
    }
    assert "--sampling-defaults" not in inference_argv(settings, "t", "/m/t.gguf", "t-1", 9000, {})
    # on the command line (a preset's ';' starts a comment, as in llama.cpp's INI)
    names = model_settings({"samplers": "top_k;temperature"}, {}).config.params["sampling"]
    assert names == {"samplers": ["top_k", "temperature"]}
    for bad in ("temp = warm", "top-k = 1.5", "logit-bias = fifteen+1", "json-schema = {"):
        [section] = parse_preset(f"[m]\nmodel = /m/m.gguf\n{bad}\n", "test.ini").sections
        with pytest.raises(OptionError, match=bad.split(" = ")[0]):
            model_settings(section.options, section.extras)


def test_the_prompt_cache_options_reach_the_worker_as_it_reads_them(tmp_path: Path) -> None:
    """``cache-ram`` (``-cram``, ``LLAMA_ARG_CACHE_RAM``) and ``no-cache-idle-slots`` become the worker's
    own flags; without them the worker has llama-server's defaults (8192 MiB, idle slots cached)."""
    from service.llamacpp.options import OptionError
    from workers.inference._cli import parse_args

    text = (
        "[a]\nmodel = /m/a.gguf\ncram = 0\nno-cache-idle-slots = 1\n[b]\nmodel = /m/b.gguf\nLLAMA_ARG_CACHE_RAM = -1\n"
    )
    a, b = parse_preset(text, "test.ini").sections
    settings = Settings.from_env({"MODELROUTER_HOME": str(tmp_path)})
    for section, want in ((a, (0, False)), (b, (-1, True))):
        params = dict(model_settings(section.options, section.extras).config.params)
        args = parse_args(inference_argv(settings, "m", "/m/m.gguf", "m-1", 9000, params)[3:])
        assert (args.cache_ram, args.cache_idle_slots) == want, params
    plain = parse_args(inference_argv(settings, "t", "/m/t.gguf", "t-1", 9000, {})[3:])
    assert (plain.cache_ram, plain.cache_idle_slots) == (8192, True)
    [bad] = parse_preset("[c]\nmodel = /m/c.gguf\ncache-ram = lots\n", "test.ini").sections
    with pytest.raises(OptionError, match="cache-ram"):
        model_settings(bad.options, bad.extras)


def test_context_options_reach_the_worker_as_it_reads_them(tmp_path: Path) -> None:
    """``-ub``, ``-fa``, ``-ctk``/``-ctv``, ``--swa-full``, ``--no-warmup``, ``--rope-*`` and ``--yarn-*`` from a
    preset become the worker's own flags with the same meaning; values llama-server refuses are refused."""
    from service.llamacpp.options import OptionError
    from workers.inference._cli import model_fields, parse_args, rope_fields

    text = (
        "[m]\nmodel = /m/m.gguf\nub = 128\nfa = off\nctk = q8_0\ncache-type-v = Q4_0\nswa-full = true\n"
        "no-warmup = 1\nrope-scaling = yarn\nrope-scale = 4\nrope-freq-base = 50000\nyarn-orig-ctx = 2048\n"
        "LLAMA_ARG_YARN_BETA_FAST = 16\nlzm = on\nno-repack = 1\ncheck-tensors = 1\nmlock = 1\nno-mmap = 1\n"
    )
    [section] = parse_preset(text, "test.ini").sections
    params = dict(model_settings(section.options, section.extras).config.params)
    settings = Settings.from_env({"MODELROUTER_HOME": str(tmp_path)})
    args = parse_args(inference_argv(settings, "m", "/m/m.gguf", "m-1", 9000, params)[3:])
    assert (args.ubatch_size, args.flash_attn, args.cache_type_k, args.cache_type_v) == (128, "off", "q8_0", "q4_0")
    assert args.swa_full is True and args.warmup is False
    assert dict(rope_fields(args)) == {
        "rope_scaling_type": 2,
        "rope_freq_scale": 0.25,
        "rope_freq_base": 50000.0,
        "yarn_orig_ctx": 2048,
        "yarn_beta_fast": 16.0,
    }
    assert dict(model_fields(args)) == {"load_mode": 2, "lazy_mode": 2, "use_extra_bufts": False, "check_tensors": True}
    plain = parse_args(inference_argv(settings, "t", "/m/t.gguf", "t-1", 9000, {})[3:])
    assert (plain.flash_attn, plain.cache_type_k, plain.warmup, rope_fields(plain)) == ("auto", "f16", True, ())
    assert model_fields(plain) == ()
    for bad in (
        "fa = sometimes",
        "ctk = q3_k",
        "rope-scaling = ntk",
        "rope-scale = 0",
        "rope-freq-base = fast",
        "load-mode = fast",
        "lazy-mode = sometimes",
    ):
        [section] = parse_preset(f"[b]\nmodel = /m/b.gguf\n{bad}\n", "test.ini").sections
        with pytest.raises(OptionError):
            model_settings(section.options, section.extras)


def test_flash_attn_takes_llama_cpps_words_in_a_preset() -> None:
    """A preset's ``flash-attn`` takes llama.cpp's words, ``-1`` for auto included (``is_autoy``):
    on and off reach the worker, auto leaves its default; anything else is refused naming the key."""
    from service.llamacpp.options import OptionError

    def converted(value: str) -> object:
        [section] = parse_preset(f"[m]\nmodel = /m/m.gguf\nflash-attn = {value}\n", "test.ini").sections
        return model_settings(section.options, section.extras).config.params.get("flash_attn")

    assert [converted(v) for v in ("on", "enabled", "1", "off", "disabled", "0")] == ["on"] * 3 + ["off"] * 3
    assert converted("auto") is None and converted("-1") is None
    with pytest.raises(OptionError, match="flash-attn"):
        converted("sometimes")


def test_the_prompt_cache_budget_and_directory_reach_the_worker_as_it_reads_them(tmp_path: Path) -> None:
    """Issue 35: a preset's ``cache-disk-max`` is the model's budget, ``serve --cache-disk-max`` every model's
    over it; the worker is given its model's own directory (made by the service, one per model) and the
    model file's sha256 when the log knows it, else no ``--model-sha256``."""
    from service.cli import build_parser, serve_settings
    from workers.inference._cli import parse_args

    [section] = parse_preset("[tiny]\nmodel = /m/tiny.gguf\ncache-disk-max = 1000\n", "test.ini").sections
    params = dict(model_settings(section.options, section.extras).config.params)
    assert params == {"cache_disk_max": 1000}
    settings = Settings.from_env({"MODELROUTER_HOME": str(tmp_path)})
    args = parse_args(
        inference_argv(settings, "org/tiny:Q4", "/m/tiny.gguf", "t-1", 9000, params, model_sha256="ab")[3:]
    )
    assert args.cache_disk_max == 1000 and args.model_sha256 == "ab"
    assert args.prompt_cache_dir is not None and Path(args.prompt_cache_dir).is_dir()
    assert Path(args.prompt_cache_dir).parent == tmp_path / "prompt-cache"
    other = parse_args(inference_argv(settings, "org/tiny:Q8", "/m/t8.gguf", "t-2", 9000, {})[3:])
    assert other.prompt_cache_dir != args.prompt_cache_dir and other.model_sha256 is None
    assert other.cache_disk_max == 2 * 1024**3, "the worker's default: 2 GiB"
    cli = build_parser().parse_args(["serve", "--home", str(tmp_path), "--cache-disk-max", "0"])
    everyone, _ = serve_settings(cli, {"HOME": str(tmp_path)})
    assert parse_args(inference_argv(everyone, "tiny", "/m/tiny.gguf", "t-3", 9000, params)[3:]).cache_disk_max == 0
    assert everyone.cache_disk_total == 8 * 1024**3
    [bad] = parse_preset("[m]\nmodel = /m/m.gguf\ncache-disk-max = lots\n", "test.ini").sections
    with pytest.raises(ValueError, match="cache-disk-max"):
        model_settings(bad.options, bad.extras)
