"""Per-model parameters reach the inference worker's command line (presets → flags)."""

from __future__ import annotations

from pathlib import Path

from service.llamacpp.options import model_settings
from service.presets import parse_preset
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
