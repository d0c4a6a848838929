"""``/props``' ``default_generation_settings.params``: the sampler settings of the command line.

llama-server's ``get_res_props`` shows a default ``task_params`` holding the
command line's ``params.sampling`` (``tools/server/server-context.cpp``):
``--seed``, ``--temp``, ``--top-k``, ``--ignore-eos``... as ``common/arg.cpp``
stored them (a negative ``--temp`` as 0, ``--seed -1`` as the uint32
4294967295, ``--samplers`` by their names), and the rest at that struct's
defaults (``reasoning_format`` ``none``, ``n_keep`` 0). The upstream
``test_basic.py::test_server_props`` asserts ``params["seed"] == server.seed``.
Both modes: single-model (``-m``) and a router preset's section.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from devtools.service_process import ServiceProcess
from tests.dropin.conftest import Serve
from tests.service_probes import wait_for_event

SAMPLING = {
    "seed": 42,
    "temperature": 0.25,
    "top_k": 7,
    "top_p": 0.5,
    "min_p": 0.125,
    "typical_p": 0.75,
    "repeat_penalty": 1.5,
    "repeat_last_n": 32,
    "presence_penalty": 0.5,
    "frequency_penalty": 0.25,
    "dry_multiplier": 0.5,
    "mirostat": 2,
    "mirostat_tau": 4.0,
    "mirostat_eta": 0.2,
    "ignore_eos": True,
    "samplers": ["top_k", "temperature"],
}
"""What llama-server shows for the command lines below."""


def _params(url: str, **query: str) -> dict[str, Any]:
    answer = httpx.get(f"{url}/props", params=query, timeout=120)
    assert answer.status_code == 200, answer.text
    params: dict[str, Any] = answer.json()["default_generation_settings"]["params"]
    return params


def _assert_shown(params: dict[str, Any], expected: dict[str, Any]) -> None:
    assert {key: params[key] for key in expected} == expected
    assert params["reasoning_format"] == "none" and params["n_keep"] == 0, "task_params' defaults, as llama-server"


@pytest.mark.timeout(180)
def test_single_model_props_show_the_command_lines_sampler(serve: Serve, models_dir: Path) -> None:
    svc = serve(
        "-m",
        str(models_dir / "tiny-a.gguf"),
        *("--seed", "42", "--temp", "0.25", "--top-k", "7", "--top-p", "0.5", "--min-p", "0.125"),
        *("--typical", "0.75", "--repeat-penalty", "1.5", "--repeat-last-n", "32", "--presence-penalty", "0.5"),
        *("--frequency-penalty", "0.25", "--dry-multiplier", "0.5", "--dry-base", "0.5", "--mirostat", "2"),
        *("--mirostat-ent", "4", "--mirostat-lr", "0.2", "--ignore-eos", "--samplers", "top-k;temp", "--keep", "5"),
    )
    wait_for_event(svc, "instance_ready", model="tiny-a", timeout=90)
    params = _params(svc.url)
    _assert_shown(params, {**SAMPLING, "dry_base": 1.75})  # --dry-base below 1 is ignored by llama.cpp


@pytest.mark.timeout(180)
def test_a_preset_sections_sampler_shows_in_its_props(tmp_path: Path, models_dir: Path) -> None:
    preset = tmp_path / "models.ini"
    preset.write_text(
        f"[seeded]\nmodel = {models_dir / 'tiny-a.gguf'}\nseed = 42\ntemp = 0.25\ntop-k = 7\ntop-p = 0.5\n"
        "min-p = 0.125\ntypical = 0.75\nrepeat-penalty = 1.5\nrepeat-last-n = 32\npresence-penalty = 0.5\n"
        "frequency-penalty = 0.25\ndry-multiplier = 0.5\nmirostat = 2\nmirostat-ent = 4\nmirostat-lr = 0.2\n"
        "ignore-eos = true\nsampler-seq = kt\n\n"  # ";" starts an INI comment, as in llama.cpp's
        f"[random]\nmodel = {models_dir / 'tiny-b.gguf'}\nseed = -1\ntemp = -1\n"
    )
    with ServiceProcess(tmp_path / "home", args=["--models-preset", str(preset)]) as svc:
        _assert_shown(_params(svc.url, model="seeded"), SAMPLING)
        random = _params(svc.url, model="random")
        assert (random["seed"], random["temperature"]) == (4294967295, 0.0), "stoul(-1); max(temp, 0)"
