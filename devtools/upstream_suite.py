"""llama.cpp's own server tests, unmodified, against ``llama-server`` and against ``modelrouter serve``.

Issue 32's check of drop-in parity: the per-model tests of the llama.cpp that llama-cpp-python vendors
(``tools/server/tests/unit/*.py``, upstream's default selection ``-m "not slow"``) run twice, once with a real
``llama-server`` built from the same sources (``make llama-server``) and once with a shim that puts
``modelrouter serve`` where the tests expect the binary (``LLAMA_SERVER_BIN_PATH``), argv unchanged. Both
download the models the tests name from the project's Hub look-alike, which serves stand-ins under the same
repo ids (:mod:`devtools.upstream_models`; ``MODEL_ENDPOINT`` and ``HF_ENDPOINT`` point both servers at
it). The report lists each test's outcome on both and the tests llama-server passes that modelrouter fails,
with the first line of the failure (:mod:`devtools.upstream_report`).

It lives in devtools/, not bench/: it measures conformance, not speed, and its parts are typed, linted and
unit-tested with the rest of the tooling. It is slow (every test starts a server), so ``make test`` leaves it
out; ``make upstream-suite`` runs it.

    python -m devtools.upstream_suite [--target both|llama-server|modelrouter] [--files test_basic.py ...]
        [-k EXPR] [-n N] [--timeout S] [--out DIR] [--llama-server PATH]
    python -m devtools.upstream_suite missing     # the tests' requirements not importable here
    python -m devtools.upstream_suite report      # the report again from the runs already in --out

Each test starts its own server on ``$PORT`` (a free port picked here); with ``-n N`` (pytest-xdist) the
upstream conftest gives worker ``gwK`` port ``8080 + 10 K`` instead, which must then be free. The copy of the
tests (``<work>/<target>/llama.cpp/tools/server/tests``, beside a link to the sources' ``models/`` for the
chat templates) keeps each run's downloads (``tmp/``) apart and the vendored tree untouched.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from devtools import llama_build
from devtools.hub_control import HubServer
from devtools.upstream_models import build_hub
from devtools.upstream_report import Outcome, parse_junit, render_markdown
from service.supervision.ports import free_port

ROOT = Path(__file__).resolve().parents[1]
THEIRS, OURS = "llama-server", "modelrouter"
# Requirement names whose module is imported under another name.
IMPORT_NAMES = {"pytest-xdist": "xdist", "prometheus-client": "prometheus_client"}
# Variables of the caller's shell that would change either server or the tests, and not equally.
DROPPED_PREFIXES = ("LLAMA_ARG_", "MODELROUTER_", "HF_")
DROPPED = ("LLAMA_CACHE", "LLAMA_API_KEY", "MODEL_ENDPOINT", "DEBUG", "DEBUG_EXTERNAL", "N_GPU_LAYERS", "PORT")

SHIM = """#!/bin/sh
# `modelrouter serve` where llama.cpp's server tests expect llama-server: argv passes through unchanged.
# Each start gets a fresh home, as each llama-server start has no state but its cache (LLAMA_CACHE).
home=$(mktemp -d "{homes}/serve-XXXXXX") || exit 1
export MODELROUTER_HOME="$home"
export PYTHONPATH="{root}${{PYTHONPATH:+:$PYTHONPATH}}"
exec "{python}" -m service.cli serve "$@"
"""


def requirement_names(requirements: str) -> list[str]:
    """The distribution names in a requirements file, without their version pins."""
    names = []
    for line in requirements.splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            names.append(line.split(";")[0].split("[")[0].split("~")[0].split("=")[0].split(">")[0].split("<")[0])
    return [n.strip() for n in names if n.strip()]


def missing_requirements(requirements: str) -> list[str]:
    """The tests' requirements this interpreter cannot import. Installed unpinned: the pins (``openai~=2.14``,
    ``pytest~=8.3``) would downgrade what the project itself needs, and the tests run on newer versions."""
    names = requirement_names(requirements)
    return [n for n in names if importlib.util.find_spec(IMPORT_NAMES.get(n, n).replace("-", "_")) is None]


def tests_source() -> Path:
    return llama_build.vendored_llama_cpp() / "tools" / "server" / "tests"


def workspace(work: Path, target: str) -> Path:
    """A fresh copy of the upstream tests for one run, placed so their ``../../../models`` paths resolve."""
    source = llama_build.vendored_llama_cpp()
    tree = work / target / "llama.cpp"
    if tree.exists():
        shutil.rmtree(tree)
    tests = tree / "tools" / "server" / "tests"
    shutil.copytree(source / "tools" / "server" / "tests", tests, ignore=shutil.ignore_patterns("tmp", "__pycache__"))
    (tree / "models").symlink_to(source / "models")
    return tests


def write_shim(work: Path) -> Path:
    """The script that stands in for the llama-server binary (fresh homes under ``<work>/homes``)."""
    homes = work / "homes"
    if homes.exists():
        shutil.rmtree(homes)
    homes.mkdir(parents=True)
    shim = work / "modelrouter-as-llama-server"
    shim.write_text(SHIM.format(homes=homes, root=ROOT, python=sys.executable))
    shim.chmod(0o755)
    return shim


def test_env(hub_url: str, binary: Path, port: int) -> dict[str, str]:
    """The environment of a run: the caller's, less what would skew it, pointed at the Hub look-alike."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(DROPPED_PREFIXES) and k not in DROPPED and k != "PYTHONPATH"
    }
    env |= {"MODEL_ENDPOINT": hub_url + "/", "HF_ENDPOINT": hub_url, "LLAMA_SERVER_BIN_PATH": str(binary)}
    env |= {"PORT": str(port), "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}
    env |= {"PYTHONDONTWRITEBYTECODE": "1"}
    return env


def pytest_command(args: argparse.Namespace, junit: Path) -> list[str]:
    files = [f if f.startswith("unit/") else f"unit/{f}" for f in args.files] or ["unit"]
    cmd = [sys.executable, "-m", "pytest", *files, "-m", args.marks, "-p", "no:cacheprovider", f"--junitxml={junit}"]
    cmd += ["-o", "junit_family=xunit1", "-q", "-rN"]
    if args.k:
        cmd += ["-k", args.k]
    if args.n:
        cmd += ["-n", str(args.n)]
    if args.timeout and importlib.util.find_spec("pytest_timeout") is not None:
        cmd += [f"--timeout={args.timeout}"]
    return cmd


def run_target(args: argparse.Namespace, target: str, binary: Path, hub_url: str) -> None:
    """One full run against one server: its JUnit XML, outcomes and wall time land in ``args.out``."""
    tests = workspace(args.work, target)
    junit = args.out / f"{target}.xml"
    junit.unlink(missing_ok=True)
    cmd = pytest_command(args, junit)
    log = args.out / f"{target}.log"
    print(f"[{target}] {' '.join(cmd)}  (log: {log})", file=sys.stderr, flush=True)
    started = time.monotonic()
    with log.open("w") as out:
        subprocess.run(cmd, cwd=tests, env=test_env(hub_url, binary, free_port()), stdout=out, stderr=subprocess.STDOUT)
    seconds = time.monotonic() - started
    outcomes = parse_junit(junit.read_text()) if junit.exists() else {}
    record = {"target": target, "binary": str(binary), "command": cmd, "seconds": seconds}
    record["outcomes"] = {t: vars(o) for t, o in outcomes.items()}
    (args.out / f"{target}.json").write_text(json.dumps(record, indent=1))
    print(f"[{target}] {len(outcomes)} tests in {seconds:.0f} s", file=sys.stderr, flush=True)


def report(out: Path) -> str:
    """The markdown report of the runs in ``out`` (``report.md``, and ``report.json`` with every outcome)."""
    runs: dict[str, dict[str, Outcome]] = {}
    seconds: dict[str, float] = {}
    for target in (THEIRS, OURS):
        path = out / f"{target}.json"
        if path.exists():
            record = json.loads(path.read_text())
            runs[target] = {t: Outcome(**o) for t, o in record["outcomes"].items()}
            seconds[target] = record["seconds"]
    text = render_markdown(runs, seconds, THEIRS, OURS)
    (out / "report.md").write_text(text)
    summary = {t: {n: vars(o) for n, o in r.items()} for t, r in runs.items()}
    (out / "report.json").write_text(json.dumps({"seconds": seconds, "outcomes": summary}, indent=1))
    return text


def llama_server_binary(given: str | None) -> Path:
    path = Path(given) if given else llama_build.llama_server_path()
    if not path.exists():
        sys.exit(f"no llama-server at {path}: build it with `make llama-server` or name one with --llama-server")
    return path


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m devtools.upstream_suite", description=__doc__.split("\n")[0])
    p.add_argument("action", nargs="?", default="run", choices=["run", "missing", "report"])
    p.add_argument("--target", default="both", choices=["both", THEIRS, OURS])
    p.add_argument("--files", nargs="*", default=[], help="test files under unit/ (default: all)")
    p.add_argument("-k", default="", help="pytest's -k expression")
    p.add_argument("-m", dest="marks", default="not slow", help="pytest's -m expression (upstream's default)")
    p.add_argument("-n", type=int, default=0, help="pytest-xdist workers (ports 8080 + 10 K)")
    p.add_argument("--timeout", type=int, default=300, help="seconds per test (pytest-timeout)")
    p.add_argument("--llama-server", help="the llama-server binary (default: the one `make llama-server` builds)")
    p.add_argument("--out", type=Path, default=Path("upstream-suite-report"), help="where the report goes")
    p.add_argument("--work", type=Path, default=llama_build.cache_root().parent / "upstream-suite")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.out = args.out.resolve()
    args.work = args.work.resolve()
    if args.action == "missing":
        print(" ".join(missing_requirements((tests_source() / "requirements.txt").read_text())))
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    if args.action == "run":
        lacking = missing_requirements((tests_source() / "requirements.txt").read_text())
        if lacking:
            sys.exit(f"the upstream tests need: pip install {' '.join(lacking)}   (or run `make upstream-suite`)")
        targets = [THEIRS, OURS] if args.target == "both" else [args.target]
        binaries = {
            t: llama_server_binary(args.llama_server) if t == THEIRS else write_shim(args.work) for t in targets
        }
        with HubServer.start(build_hub(args.work / "hub")) as hub:
            for target in targets:
                run_target(args, target, binaries[target], hub.url)
    print(report(args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
