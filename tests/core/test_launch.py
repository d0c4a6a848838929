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


def _other_value(name: str) -> object:
    """A value of option ``name`` that is not the worker's default: of its type, among its choices."""
    row, default = ROWS[name], DEFAULTS[name]
    if isinstance(default, bool):
        return not default
    if row.kind == "list":
        return ("/a.gguf,/b.gguf", "/c.gguf")
    if row.kind == "json":
        return '{"temperature":0.25}'
    if row.choices is not None:
        return next(choice for choice in row.choices if choice != default)
    samples = {int: 7, float: 0.5, str: "/some/path"}
    if row.parse in samples:
        return samples[row.parse] if samples[row.parse] != default else row.parse("3")
    # a normaliser: -fa, -ngl, -ts and -fitt, --spec-type
    for words in (("on", "off"), ("3", "7"), ("2,1", "1,1"), ("ngram-simple", "none")):
        try:
            return next(v for v in (row.parse(w) for w in words) if v != default)
        except ValueError:
            continue
    raise AssertionError(f"no sample value for {name}")


EVERY_OPTION_SET = InferenceLaunch(**{name: _other_value(name) for name in ROWS})  # type: ignore[arg-type]  # each of its row's type


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


def test_reasoning_takes_llama_cpps_words() -> None:
    """``--reasoning``/``-rea``: llama.cpp's truthy, falsey and auto words (``is_truthy``, ``is_autoy``)."""
    spelled = {"on": ("on", "enabled", "true", "1"), "off": ("off", "disabled", "false", "0"), "auto": ("auto", "-1")}
    for value, words in spelled.items():
        assert [InferenceLaunch.from_argv(["-rea", word]).reasoning for word in words] == [value] * len(words)
    assert InferenceLaunch.from_argv(["--reasoning", "off"]).to_argv() == ["--reasoning", "off"]
    with pytest.raises(SystemExit):
        InferenceLaunch.from_argv(["-rea", "maybe"])


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
    launch = dataclasses.replace(EVERY_OPTION_SET, load_mode="mlock", lazy_mode="on", rope_scaling="yarn")
    assert dict(launch.llama_fields("model")) == {
        "load_mode": 2,
        "lazy_mode": 2,
        "no_host": True,
        "check_tensors": True,
        "split_mode": 0,
        "main_gpu": 7,
    }
    assert dict(launch.llama_fields("context"))["rope_scaling_type"] == 2
    assert InferenceLaunch().llama_fields("context") == ()
