"""The workers' packages export what they say, and the lazy ones stay cheap where it matters.

Why cheap matters: ``python -m workers.download`` installs its signal handlers before
anything slow is imported, ``python -m workers.inference`` records early stop signals
before its heavy imports, and the inference worker's path to ready imports neither the
GGUF check (gguf, numpy) nor the request front (which loads with the model).
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

import pytest

from tests.workers.conftest import REPO_ROOT, worker_env

PACKAGES = [
    "workers",
    "workers.runtime",
    "workers.download",
    "workers.inference",
    "workers.inference.engine",
    "workers.inference.llama",
    "workers.inference.http",
]


@pytest.mark.parametrize("name", PACKAGES)
def test_every_exported_name_resolves(name: str) -> None:
    package = importlib.import_module(name)
    exported = package.__all__
    assert len(set(exported)) == len(exported)
    missing = [n for n in exported if getattr(package, n, None) is None]
    assert not missing, f"{name} exports {missing} but has no such names"
    homes = getattr(package, "_HOMES", None)
    if homes is not None:  # a lazy package maps each exported name to where it lives, and nothing else
        assert set(homes) == set(exported)


def _loaded_after(statement: str) -> list[str]:
    """The modules a fresh interpreter has loaded after ``statement``."""
    code = f"import sys; {statement}; import json; print(json.dumps(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        env=worker_env(),
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    loaded: list[str] = json.loads(done.stdout.splitlines()[-1])
    return loaded


def test_the_download_workers_signal_first_start_loads_no_event_classes() -> None:
    loaded = _loaded_after("import workers.download.__main__")
    assert "workers.download._interrupts" in loaded and "workers.runtime._parent_watch" in loaded
    assert not [
        m for m in loaded if m.startswith(("service", "workers.runtime._worker_runtime", "workers.download._job"))
    ]


def test_the_inference_package_loads_nothing_before_its_main_records_early_signals() -> None:
    loaded = _loaded_after("import workers.inference")
    assert [m for m in loaded if m.startswith(("workers", "service"))] == ["workers", "workers.inference"]


def test_the_inference_workers_path_to_ready_skips_what_it_needs_later() -> None:
    loaded = _loaded_after("import workers.inference._worker")
    assert "workers.inference.engine._batch" in loaded and "workers.inference.http.server._handler" in loaded
    later = (
        "gguf",
        "numpy",
        "jinja2",
        "llama_cpp.llama",
        "workers.inference.llama._gguf_check",
        "workers.inference.llama._tokenize",
        "workers.inference.http.server._front",
    )
    assert not [m for m in loaded if m in later or m.startswith(tuple(f"{p}." for p in later))]
