"""libgomp's barrier spinning is bounded before llama.cpp loads, unless the user chose a wait policy."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.workers.conftest import REPO_ROOT
from workers.inference.llama._bindings import OMP_SPIN, bound_omp_spin

pytest.importorskip("llama_cpp")

_PROBE = """
import json, os
from workers.inference.llama import lowlevel
before = os.environ.get("GOMP_SPINCOUNT")
lowlevel()
print(json.dumps([before, os.environ.get("GOMP_SPINCOUNT")]))
"""


@pytest.mark.parametrize(
    ("given", "expected"),
    [({}, OMP_SPIN), ({"GOMP_SPINCOUNT": "50"}, "50"), ({"OMP_WAIT_POLICY": "active"}, None)],
)
def test_the_spin_bound_yields_to_the_users_choice(given: dict[str, str], expected: str | None) -> None:
    environ = dict(given)
    bound_omp_spin(environ)
    assert environ.get("GOMP_SPINCOUNT") == expected


def test_loading_the_bindings_sets_the_bound_first() -> None:
    """In a fresh interpreter (libgomp reads its environment once, when it loads)."""
    env = {k: v for k, v in os.environ.items() if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")}
    env["PYTHONPATH"] = str(REPO_ROOT)
    out = subprocess.run(
        [sys.executable, "-c", _PROBE], env=env, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120, check=True
    )
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [None, OMP_SPIN]
