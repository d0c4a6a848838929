"""CI: the wheel, installed as a user would, serves and migrates.

Builds the wheel, checks it holds the product only (service, workers,
migrations), installs it into a scratch virtualenv (pip's cache and the
configured package indexes are the only network it needs), starts
``modelrouter serve`` from that venv, outside the checkout, on a free port with
a temporary home, waits for ``/health``, checks that the migrations ran to
head, and stops it with SIGTERM.

Usage: ``python3 .ci/wheel_check.py`` from anywhere (stdlib only).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import venv
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = {"service", "workers", "migrations"}
_NOT_SOURCE = (".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".*_cache", ".hypothesis")
# A cold venv imports litestar, SQLAlchemy and llama_cpp for the first time: be generous.
HEALTH_TIMEOUT = 180.0
HEAD_SCRIPT = (
    "from alembic.script import ScriptDirectory\n"
    "from service.recovery.migrate import alembic_config\n"
    "print(ScriptDirectory.from_config(alembic_config()).get_current_head())\n"
)


def _run(*cmd: str | Path, cwd: Path) -> str:
    done = subprocess.run([str(c) for c in cmd], cwd=cwd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"FAILED ({done.returncode}): {' '.join(map(str, cmd))}\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}")
    return done.stdout


def build_wheel(bin_dir: Path, scratch: Path) -> Path:
    # From a copy: setuptools builds in-tree, and a stale build/lib (a module since
    # removed) would slip into the wheel and into this check.
    source = scratch / "source"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(*_NOT_SOURCE))
    out = scratch / "dist"
    _run(bin_dir / "pip", "wheel", "--no-deps", "--quiet", "--wheel-dir", out, source, cwd=scratch)
    (wheel,) = out.glob("modelrouter-*.whl")
    return wheel


def check_contents(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
    tops = {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")}
    if tops != PRODUCT:
        sys.exit(f"FAILED: the wheel's top-level entries are {sorted(tops)}, expected {sorted(PRODUCT)}")
    dashboard = ("index.html", "dashboard.js", "dashboard.css")
    for needed in ("migrations/env.py", "migrations/script.py.mako", *(f"service/api/static/{f}" for f in dashboard)):
        if needed not in names:
            sys.exit(f"FAILED: {needed} is missing from the wheel")
    if not any(n.startswith("migrations/versions/") and n.endswith(".py") and "__init__" not in n for n in names):
        sys.exit("FAILED: no migration script in the wheel")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_health(proc: subprocess.Popen[bytes], url: str, log: Path) -> dict[str, object]:
    deadline = time.monotonic() + HEALTH_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit(f"FAILED: modelrouter serve exited with {proc.returncode}\n{log.read_text()[-4000:]}")
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as answer:
                if answer.status == 200:
                    return dict(json.load(answer))
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.2)
    sys.exit(f"FAILED: no /health answer within {HEALTH_TIMEOUT:.0f} s\n{log.read_text()[-4000:]}")


def serve_and_check(bin_dir: Path, scratch: Path) -> None:
    home = scratch / "home"
    port = free_port()
    log = scratch / "serve.log"
    # Outside the checkout, with a clean PYTHONPATH: only the installed wheel can be imported.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MODELROUTER_", "PYTHON"))}
    env["HF_HUB_OFFLINE"] = "1"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [bin_dir / "modelrouter", "serve", "--home", home, "--port", str(port)],
            cwd=scratch,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        health = wait_health(proc, f"http://127.0.0.1:{port}", log)
        print(f"/health: {health}")
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            sys.exit("FAILED: modelrouter serve did not stop within 60 s of SIGTERM")
    # uvicorn re-raises the signal once it has shut down cleanly, hence -SIGTERM.
    if code not in (0, -signal.SIGTERM):
        sys.exit(f"FAILED: modelrouter serve exited with {code} after SIGTERM\n{log.read_text()[-4000:]}")
    head = _run(bin_dir / "python", "-c", HEAD_SCRIPT, cwd=scratch).strip()
    with sqlite3.connect(home / "modelrouter.db") as conn:
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        version = conn.execute("SELECT version_num FROM alembic_version").fetchone()[0]
        types = [row[0] for row in conn.execute("SELECT type FROM events ORDER BY position")]
    if not {"events", "snapshots"} <= tables or version != head:
        sys.exit(f"FAILED: tables {sorted(tables)}, alembic version {version}, head {head}")
    if types[:1] != ["router_started"] or types[-1:] != ["router_stopped"]:
        sys.exit(f"FAILED: the log of that run is {types}, expected router_started ... router_stopped")
    print(f"migrated to head {head}; the log: {', '.join(types)}")


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="modelrouter-wheel-") as tmp:
        scratch = Path(tmp)
        venv.create(scratch / "venv", with_pip=True)
        bin_dir = scratch / "venv" / "bin"
        wheel = build_wheel(bin_dir, scratch)
        check_contents(wheel)
        print(f"built {wheel.name}: product only")
        # llama-cpp-python from the wheelhouse `make install` uses (built for this CPU, AMX off, once), not
        # a second 12-minute compile with llama.cpp's defaults that pip would then cache for `make test`.
        house = _run(sys.executable, "-m", "devtools.llama_build", "wheel", cwd=ROOT).strip()
        _run(bin_dir / "pip", "install", "--quiet", "--find-links", house, wheel, cwd=scratch)
        probe = [bin_dir / "python", "-c", "import devtools"]
        if subprocess.run(probe, cwd=scratch, capture_output=True, check=False).returncode == 0:
            sys.exit("FAILED: devtools is importable from the wheel install")
        serve_and_check(bin_dir, scratch)
    print("wheel check passed")


if __name__ == "__main__":
    main()
