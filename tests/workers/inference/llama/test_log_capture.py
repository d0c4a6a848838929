"""llama.cpp's log callback outlives the object that installed it.

``llama_log_set`` is process-wide: a callback collected while installed turns
llama.cpp's next log line into a jump into freed memory (a SIGSEGV seen in the
suite, in a model's ``close`` after a test had dropped its ``LlamaLog``). The
check runs in a child process so that a crash is a failed exit, not a dead suite.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("llama_cpp")

ROOT = Path(__file__).resolve().parents[4]
_CHILD = textwrap.dedent(
    """
    import gc
    from workers.inference.llama._bindings import lowlevel
    from workers.inference.llama._log import LlamaLog

    seen = []
    LlamaLog(lambda level, text: seen.append(text)).install()  # dropped at once
    for _ in range(3):
        gc.collect()
        junk = [bytearray(4096) for _ in range(2000)]  # reuse whatever memory was freed
        del junk
    lc = lowlevel()
    model = lc.llama_model_load_from_file(b"/nonexistent/model.gguf", lc.llama_model_default_params())
    assert not model
    print(sum("nonexistent" in line or "failed" in line for line in seen))
    """
)


def test_a_dropped_llama_log_still_receives_lines_and_nothing_crashes() -> None:
    done = subprocess.run([sys.executable, "-c", _CHILD], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"the child died ({done.returncode}): {done.stderr[-2000:]}"
    assert int(done.stdout.strip().splitlines()[-1]) >= 1, "llama.cpp's load failure never reached the callback"
