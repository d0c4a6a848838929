"""The pure half of :mod:`devtools.upstream_suite`: per-test outcomes from pytest's JUnit XML, and what
``modelrouter serve`` fails that ``llama-server`` passes.

Nothing here starts a process or reads a file: the runner hands in the XML text and writes what these
functions return, and ``tests/devtools/test_upstream_report.py`` checks them on small documents.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections import defaultdict
from dataclasses import dataclass, field
from fnmatch import fnmatchcase

PASSED, FAILED, ERROR, SKIPPED = "passed", "failed", "error", "skipped"

_NO_MCP = "no MCP: the MCP options are accepted and ignored (docs/llama-cpp-compat.md, Options)"
_NO_TOOLS = "no built-in agent tools: /tools answers llama-server's 403 feature_disabled (--tools accepted, ignored)"
_NO_PROXY = "no MCP CORS proxy: /cors-proxy answers llama-server's 403 feature_disabled (--ui-mcp-proxy ignored)"
_GENERIC_TOOLS = (
    "tools for a template that cannot render them get llama.cpp's generic JSON tool prompt (llama-server drops them)"
)
_SLEEP_METRICS = (
    "single-model /metrics adds the router's series, which say the model sleeps (the llamacpp:* lines are equal)"
)
_IMAGE_400 = "an image for a model without a projector is our 400, not llama-server's 500 (issue 32, group 10)"
# Tests llama-server passes that modelrouter fails on purpose (node id patterns), and why: the report lists
# them apart, and the acceptance (every test llama-server passes) counts them as documented.
DELIBERATE: tuple[tuple[str, str], ...] = (
    ("unit/test_mcp_servers.py::*", _NO_MCP),
    ("unit/test_tools_builtin.py::*", _NO_TOOLS),
    ("unit/test_proxy.py::test_mcp_proxy*", _NO_PROXY),
    ("unit/test_security.py::test_cors_proxy_*", _NO_PROXY),
    ("unit/test_compat_anthropic.py::test_anthropic_vision_format_accepted", _IMAGE_400),
    ("unit/test_compat_anthropic.py::test_anthropic_tool_result_with_image", _IMAGE_400),
    ("unit/test_compat_anthropic.py::test_anthropic_tool_use_basic", _GENERIC_TOOLS),
    ("unit/test_sleep.py::test_server_sleep_read_only_endpoints", _SLEEP_METRICS),
)


@dataclass(frozen=True)
class Outcome:
    """One test's result on one server: ``passed``, ``failed``, ``error`` or ``skipped``, the first line of
    why (empty when it passed) and how long it took."""

    outcome: str
    reason: str = ""
    seconds: float = 0.0


@dataclass(frozen=True)
class Comparison:
    """How ``ours`` (modelrouter) did on the tests ``theirs`` (llama-server) passes."""

    total: int  # tests that ran on llama-server
    theirs_passed: int
    ours_passed_of_theirs: int
    regressions: dict[str, Outcome] = field(default_factory=dict)  # llama-server passes, we do not
    deliberate: dict[str, str] = field(default_factory=dict)  # ... and we differ on purpose: why
    gains: dict[str, Outcome] = field(default_factory=dict)  # we pass, llama-server does not
    missing: tuple[str, ...] = ()  # llama-server passes, absent from our run (not selected, or it crashed)


def _node_id(case: ET.Element) -> str:
    """``unit/test_basic.py::test_x[p]`` from JUnit's ``classname="unit.test_basic"`` and ``name``."""
    parts = case.get("classname", "").split(".")
    # pytest writes unit/test_a.py::Klass::test_b as classname "unit.test_a.Klass", name "test_b"
    module_end = next((i for i, p in enumerate(parts) if p.startswith("test_")), len(parts) - 1)
    file = "/".join(parts[: module_end + 1]) + ".py"
    return "::".join([file, *parts[module_end + 1 :], case.get("name", "")])


def first_line(text: str, limit: int = 300) -> str:
    """The first non-empty line of a failure message, shortened: the reason a report shows."""
    for line in text.splitlines():
        line = line.strip()
        if line:
            return line if len(line) <= limit else line[: limit - 1] + "…"
    return ""


def _outcome(case: ET.Element) -> Outcome:
    seconds = float(case.get("time", "0") or 0)
    failure, error, skipped = case.find("failure"), case.find("error"), case.find("skipped")
    # A failure beats an error in teardown; an error alone (setup or teardown) is an error.
    for kind, element in ((FAILED, failure), (ERROR, error), (SKIPPED, skipped)):
        if element is not None:
            why = element.get("message") or element.text or ""
            return Outcome(kind, first_line(why), seconds)
    return Outcome(PASSED, "", seconds)


def parse_junit(xml_text: str) -> dict[str, Outcome]:
    """Every test case in a pytest ``--junitxml`` document, by node id."""
    root = ET.fromstring(xml_text)
    return {_node_id(case): _outcome(case) for case in root.iter("testcase")}


def count(outcomes: dict[str, Outcome]) -> dict[str, int]:
    """How many tests had each outcome (all four keys, zero included), and the total."""
    counts = {k: 0 for k in (PASSED, FAILED, ERROR, SKIPPED)}
    for o in outcomes.values():
        counts[o.outcome] += 1
    return {**counts, "total": len(outcomes)}


def deliberate_reason(node_id: str, known: tuple[tuple[str, str], ...] = DELIBERATE) -> str | None:
    """Why modelrouter fails this test on purpose, or None."""
    return next((why for pattern, why in known if fnmatchcase(node_id, pattern)), None)


def compare(
    theirs: dict[str, Outcome], ours: dict[str, Outcome], known: tuple[tuple[str, str], ...] = DELIBERATE
) -> Comparison:
    """The acceptance of issue 32: every test llama-server passes, modelrouter passes too, apart from the
    differences on purpose (``known``), which are kept apart."""
    theirs_passed = sorted(t for t, o in theirs.items() if o.outcome == PASSED)
    failing = [t for t in theirs_passed if t in ours and ours[t].outcome != PASSED]
    deliberate = {t: why for t in failing if (why := deliberate_reason(t, known)) is not None}
    regressions = {t: ours[t] for t in failing if t not in deliberate}
    gains = {
        t: theirs[t]
        for t, o in sorted(ours.items())
        if o.outcome == PASSED and t in theirs and theirs[t].outcome != PASSED
    }
    return Comparison(
        total=len(theirs),
        theirs_passed=len(theirs_passed),
        ours_passed_of_theirs=sum(1 for t in theirs_passed if t in ours and ours[t].outcome == PASSED),
        regressions=regressions,
        deliberate=deliberate,
        gains=gains,
        missing=tuple(t for t in theirs_passed if t not in ours),
    )


def file_of(node_id: str) -> str:
    """``unit/test_basic.py`` of ``unit/test_basic.py::test_x[p]``."""
    return node_id.split("::", 1)[0]


def by_file(outcomes: dict[str, Outcome]) -> dict[str, dict[str, Outcome]]:
    """Tests grouped by their file, files and tests in order."""
    groups: dict[str, dict[str, Outcome]] = defaultdict(dict)
    for t in sorted(outcomes):
        groups[file_of(t)][t] = outcomes[t]
    return dict(sorted(groups.items()))


def _shape(reason: str) -> str:
    """A reason with its numbers and quoted values blanked, so that one cause groups its tests."""
    reason = re.sub(r"'[^']*'|\"[^\"]*\"", "'…'", reason)
    return re.sub(r"\d+(\.\d+)?", "N", reason)


def by_reason(outcomes: dict[str, Outcome]) -> dict[str, list[str]]:
    """Tests grouped by the shape of their failure reason (most tests first)."""
    groups: dict[str, list[str]] = defaultdict(list)
    for t in sorted(outcomes):
        groups[_shape(outcomes[t].reason)].append(t)
    return dict(sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])))


def _by_value(reasons: dict[str, str]) -> dict[str, list[str]]:
    groups: dict[str, list[str]] = defaultdict(list)
    for t, why in sorted(reasons.items()):
        groups[why].append(t)
    return dict(groups)


def _table(counts: dict[str, int]) -> str:
    return ", ".join(f"{counts[k]} {k}" for k in (PASSED, FAILED, ERROR, SKIPPED)) + f" of {counts['total']}"


def render_markdown(runs: dict[str, dict[str, Outcome]], seconds: dict[str, float], theirs: str, ours: str) -> str:
    """The report: each run's counts and time, then (when both ran) the comparison and the differences."""
    lines = ["# llama.cpp's server tests against llama-server and modelrouter", ""]
    for target, outcomes in runs.items():
        lines.append(f"- **{target}**: {_table(count(outcomes))}, in {seconds.get(target, 0.0):.0f} s")
    if theirs in runs and ours in runs:
        c = compare(runs[theirs], runs[ours])
        share = 100 * c.ours_passed_of_theirs / c.theirs_passed if c.theirs_passed else 100.0
        lines += [
            "",
            f"{theirs} passes {c.theirs_passed} of {c.total}; {ours} passes {c.ours_passed_of_theirs} of those "
            f"{c.theirs_passed} ({share:.0f} %); {len(c.deliberate)} more differ on purpose, {len(c.regressions)} "
            f"do not. {len(c.gains)} pass only on {ours}.",
        ]
        if c.missing:
            lines += ["", f"Not in {ours}'s run: " + ", ".join(f"`{t}`" for t in c.missing)]
        lines += ["", f"## {theirs} passes, {ours} does not ({len(c.regressions)}, by file)", ""]
        for file, in_file in by_file(c.regressions).items():
            lines += [f"### {file} ({len(in_file)})", ""]
            lines += [
                f"- `{t.split('::', 1)[1]}`: {o.outcome}: {o.reason or '(no message)'}" for t, o in in_file.items()
            ]
            lines.append("")
        lines += [f"## Differences on purpose ({len(c.deliberate)})", ""]
        for why, tests in _by_value(c.deliberate).items():
            lines.append(f"- {why}: {len(tests)} tests: " + ", ".join(f"`{t}`" for t in tests))
        lines += ["", f"## {ours} passes, {theirs} does not", ""]
        lines += [f"- `{t}`: {theirs}: {o.outcome}: {o.reason}" for t, o in c.gains.items()] or ["(none)"]
    for target, outcomes in runs.items():
        failing = {t: o for t, o in outcomes.items() if o.outcome in (FAILED, ERROR)}
        lines += ["", f"## Every failure on {target}, by reason", ""]
        for shape, tests in by_reason(failing).items():
            lines.append(f"- {len(tests)} tests: {shape or '(no message)'}: " + ", ".join(f"`{t}`" for t in tests))
    return "\n".join(lines) + "\n"
