"""llama-server's sampling options as request defaults: merged under a body, the request's own value wins."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from workers.inference.http.dialects._server_defaults import load, shown, with_defaults

DEFAULTS = {"temperature": 0.1, "top_k": 3, "mirostat": 2, "n_predict": 7, "grammar": 'root ::= "a"'}


def test_a_default_fills_only_what_the_request_leaves_out() -> None:
    out = with_defaults({"temperature": 0.9, "prompt": "x"}, DEFAULTS, "/completions")
    assert out["temperature"] == 0.9 and out["top_k"] == 3 and out["mirostat"] == 2 and out["prompt"] == "x"
    assert with_defaults({"temperature": None}, DEFAULTS, "/completions")["temperature"] == 0.1
    assert "mirostat" not in with_defaults({"mirostat_mode": 1}, DEFAULTS, "/completions")  # the same setting
    assert "grammar" not in with_defaults({"json_schema": {}}, DEFAULTS, "/completions")  # one constraint


@pytest.mark.parametrize(
    ("route", "field"),
    [
        ("/completions", "max_tokens"),
        ("/chat/completions", "max_tokens"),
        ("/completion", "n_predict"),
        ("/infill", "n_predict"),
        ("/responses", "max_output_tokens"),
    ],
)
def test_n_predict_becomes_the_routes_own_length_field(route: str, field: str) -> None:
    assert with_defaults({}, DEFAULTS, route)[field] == 7
    for given in ("max_tokens", "max_completion_tokens", "n_predict", "max_output_tokens"):
        out = with_defaults({given: 2}, DEFAULTS, route)
        assert out[given] == 2 and (field == given or field not in out)


def test_anthropics_max_tokens_and_an_unlimited_default_are_left_alone() -> None:
    assert "max_tokens" not in with_defaults({}, DEFAULTS, "/messages")
    assert "max_tokens" not in with_defaults({}, {"n_predict": -1}, "/completions")
    assert with_defaults({}, {"n_predict": -1}, "/completion")["n_predict"] == -1


def test_files_are_read_at_start_and_a_bad_one_is_named(tmp_path: Path) -> None:
    (tmp_path / "g.gbnf").write_text('root ::= "yes" | "no"\n')
    (tmp_path / "s.json").write_text('{"type": "integer"}')
    text = json.dumps({"grammar_file": str(tmp_path / "g.gbnf"), "json_schema_file": str(tmp_path / "s.json")})
    assert load(text) == {"grammar": 'root ::= "yes" | "no"\n', "json_schema": {"type": "integer"}}
    with pytest.raises(OSError, match=r"missing\.gbnf"):
        load(json.dumps({"grammar_file": str(tmp_path / "missing.gbnf")}))
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(ValueError, match=r"bad\.json"):
        load(json.dumps({"json_schema_file": str(tmp_path / "bad.json")}))
    assert load(None) == {} and load("") == {}


def test_props_show_letters_as_names() -> None:
    assert shown({"samplers": "kt", "temperature": 0.5}) == {"samplers": ["top_k", "temperature"], "temperature": 0.5}


def test_props_show_sampler_aliases_by_their_names() -> None:
    """``--samplers "top-k;temp"``: llama-server shows ``common_sampler_type_to_str``'s names."""
    assert shown({"samplers": ["top-k", "temp", "typical"]}) == {"samplers": ["top_k", "temperature", "typ_p"]}


def test_props_show_the_seed_as_llama_cpps_uint32() -> None:
    """``--seed 42`` is shown as given; ``--seed -1`` (random) is 4294967295 as ``std::stoul`` stores it."""
    assert shown({}, 42) == {"seed": 42}
    assert shown({}, -1) == {"seed": 4294967295}
    assert shown({"temperature": 0.5}) == {"temperature": 0.5}
