"""The inference launch (``service/core/launch.py``): one table of options gives the worker's command
line, its parse, and the typed reading of a model's parameters; old ``instance_requested`` payloads
read as the same launch."""

from __future__ import annotations

import dataclasses

import pytest

from service.core import events as ev
from service.core.launch import DEFAULTS, ROWS, InferenceLaunch
from service.core.upcasting import decode
from service.llamacpp.flags import BY_NAME

# A value other than the worker's default for every option, of its type and among its choices.
EVERY_OPTION_SET = InferenceLaunch(
    n_ctx=8192,
    n_threads=3,
    n_threads_batch=2,
    n_batch=256,
    n_ubatch=128,
    flash_attn="off",
    cache_type_k="q8_0",
    cache_type_v="q4_0",
    kv_unified=True,
    swa_full=True,
    embedding=True,
    pooling="rank",
    warmup=False,
    rope_scaling="yarn",
    rope_freq_base=50000.0,
    rope_freq_scale=0.25,
    yarn_ext_factor=0.5,
    yarn_attn_factor=1.5,
    yarn_beta_slow=2.0,
    yarn_beta_fast=16.0,
    yarn_orig_ctx=2048,
    load_mode="mlock",
    lazy_mode="on",
    repack=False,
    no_host=True,
    check_tensors=True,
    mlock=True,
    mmap=False,
    n_parallel=2,
    max_prompt_tokens=1000,
    context_shift=True,
    spm_infill=True,
    cache_ram=0,
    cache_idle_slots=False,
    slot_save_path="/tmp/slots",
    log_prompts_dir="/tmp/prompts",
    lora=("/a.gguf,/b.gguf", "/c.gguf"),
    lora_scaled=("/d.gguf:0.5",),
    lora_init_without_apply=True,
    endpoint_props=True,
    endpoint_metrics=False,
    endpoint_slots=False,
    chat_format="chatml",
    chat_template="{{ messages }}",
    chat_template_file="/t.jinja",
    jinja=False,
    chat_template_kwargs='{"a": 1}',
    reasoning_format="none",
    video_fps=1.5,
    video_timestamp_interval=250,
    video_ffmpeg_dir="/opt/ffmpeg",
    seed=42,
    sampling='{"temperature":0.25}',
)


def test_the_example_sets_every_option_of_the_table() -> None:
    unset = [name for name in ROWS if getattr(EVERY_OPTION_SET, name) == DEFAULTS[name]]
    assert unset == []


def test_the_command_line_reads_back_as_the_same_launch() -> None:
    assert InferenceLaunch.from_argv(EVERY_OPTION_SET.to_argv()) == EVERY_OPTION_SET
    assert InferenceLaunch.from_argv(InferenceLaunch().to_argv()) == InferenceLaunch()


def test_the_workers_defaults_need_no_flag() -> None:
    assert InferenceLaunch().to_argv() == []


def test_a_flag_the_table_refuses_is_a_usage_error() -> None:
    for bad in (["-fa", "sometimes"], ["-ctk", "q3_k"], ["--n-ctx", "many"], ["--reasoning-format", "x"]):
        with pytest.raises(SystemExit):
            InferenceLaunch.from_argv(bad)


def test_every_llama_server_option_of_the_table_has_its_names() -> None:
    """A row's preset key is llama-server's (or an older llama.cpp's) and its ``LLAMA_ARG_*`` is that option's."""
    wrong = []
    for name, row in ROWS.items():
        if row.key is None:
            continue
        arg = BY_NAME.get(row.key)
        if arg is None:
            wrong.append(f"{name}: {row.key} is not a llama-server option")
            continue
        if row.env != arg.env:
            wrong.append(f"{name}: env {row.env}, llama-server's {arg.env}")
    assert wrong == []


def test_model_parameters_read_as_the_launch_they_name() -> None:
    params = {
        "n_ctx": 8192,
        "n_parallel": 2,
        "lora": "/a.gguf,/b.gguf",
        "sampling": {"temperature": 0.25},
        "warmup": False,
        "endpoint_metrics": True,
        "rope_freq_scale": 0.25,
    }
    launch = InferenceLaunch.from_params(params)
    assert (launch.n_ctx, launch.n_parallel, launch.lora) == (8192, 2, ("/a.gguf,/b.gguf",))
    assert (launch.sampling, launch.warmup, launch.endpoint_metrics) == ('{"temperature":0.25}', False, True)
    assert launch.rope_freq_scale == 0.25


def test_metrics_are_off_unless_the_parameters_turn_them_on() -> None:
    """llama-server's ``/metrics`` is off by default; a worker started by hand serves it."""
    assert InferenceLaunch.from_params({}).endpoint_metrics is False
    assert InferenceLaunch.from_params({}).to_argv() == ["--no-metrics"]
    assert InferenceLaunch().endpoint_metrics is True


def test_unknown_keys_and_values_that_do_not_parse_leave_the_defaults() -> None:
    launch = InferenceLaunch.from_params({"n_ctx": "many", "cache_type_k": "q3_k", "gpu_dreams": 7})
    assert launch == dataclasses.replace(InferenceLaunch(), endpoint_metrics=False)


def test_an_old_instance_requested_reads_as_the_same_launch() -> None:
    """A payload as every version so far stored it: its ``params`` are the launch (no upcasting needed)."""
    stored = {
        "instance_id": "tiny-1",
        "reason": "load",
        "port": 9000,
        "params": {"n_parallel": 2, "n_batch": 64, "cache_type_k": "q8_0", "jinja": False, "sampling": {"top_k": 7}},
    }
    event = decode("instance_requested", 1, stored)
    assert isinstance(event, ev.InstanceRequested)
    assert event.launch.to_argv() == [
        "--n-batch",
        "64",
        "--cache-type-k",
        "q8_0",
        "--n-parallel",
        "2",
        "--no-metrics",
        "--no-jinja",
        "--sampling-defaults",
        '{"top_k":7}',
    ]
    assert event.to_data()["params"] == stored["params"]


def test_llama_fields_are_the_set_options_of_their_struct_with_llama_cpps_numbers() -> None:
    assert dict(EVERY_OPTION_SET.llama_fields("model")) == {
        "load_mode": 2,
        "lazy_mode": 2,
        "no_host": True,
        "check_tensors": True,
    }
    assert dict(EVERY_OPTION_SET.llama_fields("context"))["rope_scaling_type"] == 2
    assert InferenceLaunch().llama_fields("context") == ()
