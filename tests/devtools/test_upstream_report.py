"""The upstream-suite runner's pure parts: JUnit outcomes, the comparison, the report, the requirements, the stand-ins' names."""

from __future__ import annotations

import re

from devtools.upstream_models import REPOS, TINYGEMMA_PRESET
from devtools.upstream_report import Outcome, by_reason, compare, count, deliberate_reason, parse_junit, render_markdown
from devtools.upstream_suite import SHIM, missing_requirements, requirement_names

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" tests="5">
  <testcase classname="unit.test_basic" name="test_server_start_simple" time="1.5" />
  <testcase classname="unit.test_basic" name="test_server_models" time="2.0">
    <failure message="AssertionError: assert 'a:F32' == 'tinyllama-2'&#10;second line">trace</failure>
  </testcase>
  <testcase classname="unit.test_chat_completion" name="test_chat[None-8]" time="0.5">
    <error message="failed on setup with &quot;RuntimeError: Server process died with return code 1&quot;">x</error>
  </testcase>
  <testcase classname="unit.test_lora" name="test_lora" time="0">
    <skipped type="pytest.skip" message="skipping slow test">s</skipped>
  </testcase>
  <testcase classname="unit.test_router.TestGroup" name="test_load" time="3">
    <failure message="assert 500 == 200">f</failure><error message="teardown">e</error>
  </testcase>
</testsuite></testsuites>
"""


def test_junit_cases_become_node_ids_with_outcome_and_first_line_of_the_reason() -> None:
    outcomes = parse_junit(JUNIT)
    assert outcomes["unit/test_basic.py::test_server_start_simple"] == Outcome("passed", "", 1.5)
    assert outcomes["unit/test_basic.py::test_server_models"] == Outcome(
        "failed", "AssertionError: assert 'a:F32' == 'tinyllama-2'", 2.0
    )
    assert outcomes["unit/test_chat_completion.py::test_chat[None-8]"].outcome == "error"
    assert outcomes["unit/test_lora.py::test_lora"] == Outcome("skipped", "skipping slow test", 0.0)
    # a failure beats the error of its teardown; a class becomes a node id part
    assert outcomes["unit/test_router.py::TestGroup::test_load"].outcome == "failed"
    assert count(outcomes) == {"passed": 1, "failed": 2, "error": 1, "skipped": 1, "total": 5}


def test_the_comparison_counts_only_what_llama_server_passes() -> None:
    p, f = Outcome("passed"), Outcome("failed", "assert 1 == 2")
    theirs = {"a": p, "b": p, "c": f, "d": p, "e": f}
    ours = {"a": p, "b": f, "c": p, "e": f}
    c = compare(theirs, ours)
    assert (c.total, c.theirs_passed, c.ours_passed_of_theirs) == (5, 3, 1)
    assert c.regressions == {"b": f}
    assert c.gains == {"c": f}  # what llama-server said about the test we pass
    assert c.missing == ("d",)


def test_differences_on_purpose_are_kept_apart_with_their_reason() -> None:
    p, f = Outcome("passed"), Outcome("failed", "assert 403 == 200")
    known = (("unit/test_tools_builtin.py::*", "no built-in tools"),)
    theirs = {"unit/test_tools_builtin.py::test_read_file": p, "unit/test_basic.py::test_models": p}
    ours = {"unit/test_tools_builtin.py::test_read_file": f, "unit/test_basic.py::test_models": f}
    c = compare(theirs, ours, known)
    assert c.deliberate == {"unit/test_tools_builtin.py::test_read_file": "no built-in tools"}
    assert list(c.regressions) == ["unit/test_basic.py::test_models"]
    assert deliberate_reason("unit/test_mcp_servers.py::test_mcp_tool_invocation") is not None
    assert deliberate_reason("unit/test_basic.py::test_server_models") is None


def test_failures_group_by_the_shape_of_their_reason() -> None:
    outcomes = {
        "x::1": Outcome("failed", "assert 'a' == 'tinyllama-2'"),
        "x::2": Outcome("failed", "assert 'b' == 'tinyllama-infill'"),
        "x::3": Outcome("failed", "Server process died with return code 1"),
    }
    assert by_reason(outcomes) == {
        "assert '…' == '…'": ["x::1", "x::2"],
        "Server process died with return code N": ["x::3"],
    }


def test_the_report_gives_both_counts_and_each_difference_with_its_reason() -> None:
    theirs = {"unit/test_a.py::t1": Outcome("passed"), "unit/test_a.py::t2": Outcome("passed")}
    ours = {"unit/test_a.py::t1": Outcome("passed"), "unit/test_a.py::t2": Outcome("failed", "assert 400 == 200")}
    text = render_markdown(
        {"llama-server": theirs, "modelrouter": ours}, {"llama-server": 10.0}, "llama-server", "modelrouter"
    )
    assert (
        "llama-server passes 2 of 2; modelrouter passes 1 of those 2 (50 %); 0 more differ on purpose, 1 do not" in text
    )
    assert "- `t2`: failed: assert 400 == 200" in text


def test_requirements_are_named_without_pins_and_only_the_unimportable_are_missing() -> None:
    text = (
        "aiohttp~=3.9.3\npytest~=8.3.3\npytest-xdist~=3.6\n# comment\nprometheus-client~=0.20.0\nno-such-module-x>=1\n"
    )
    assert requirement_names(text) == ["aiohttp", "pytest", "pytest-xdist", "prometheus-client", "no-such-module-x"]
    assert "no-such-module-x" in missing_requirements(text)
    assert "pytest" not in missing_requirements(text)


def test_the_shim_passes_argv_through_to_modelrouter_serve_unchanged() -> None:
    text = SHIM.format(homes="/h", root="/r", python="/p")
    assert text.splitlines()[-1] == 'exec "/p" -m service.cli serve "$@"'
    assert 'MODELROUTER_HOME="$home"' in text


def _tag(file_name: str) -> str:
    """The quantization tag llama.cpp reads off a file name (common/download.cpp, ``re_tag``)."""
    m = re.search(r"[-.]([A-Z0-9_]+)$", file_name.rsplit("/", 1)[-1].removesuffix(".gguf"), re.IGNORECASE)
    return m.group(1).upper() if m else ""


def test_the_stand_ins_are_named_so_that_llama_cpp_picks_them_under_the_ids_the_tests_use() -> None:
    # the ids the upstream tests name (repo without --hf-file: the model is picked by its tag)
    for cache_id in (
        "ggml-org/test-model-stories260K:F32",
        "ggml-org/test-model-stories260K-infill:F32",
        "ggml-org/tinygemma3-GGUF:Q8_0",
        "ggml-org/test-model-router-download:F16",
    ):
        repo, tag = cache_id.split(":")
        models = [f for f in REPOS[repo] if f.endswith(".gguf") and "mmproj" not in f]
        assert [_tag(f) for f in models] == [tag], cache_id
    assert any("mmproj" in f for f in REPOS["ggml-org/tinygemma3-GGUF"])
    for repo in re.findall(r"hf-repo = ([^:\n]+)", TINYGEMMA_PRESET):
        assert repo in REPOS
