"""Worker logs on against off: decoding speed with every worker line forwarded at debug level.

Issue 37's bar: decoding with verbose worker logging keeps at least 0.97x the
tokens per second of logging off (one stream, Gemma 3 270M Q4_K_M). Both
targets are this source tree through ``modelrouter serve`` (``bench/engine_ab.py``
does the measuring, rounds alternating, paired ratios): ``off`` runs at
``-lv 0`` (errors only on the console), ``verbose`` at ``-lv 5`` (debug: every
forwarded worker line, llama.cpp's load log included, printed). Each
worker's own file is written in both, as it always is; each finished request
adds its ``request_finished`` line there.

    python bench/worker_logs.py --rounds 6

Read the ``one stream tok/s`` row's ratio (``verbose / off``).

Measured 2026-12-03 14:35 on a quiet 2-CPU VM (load 0.6-1.8): one stream 38.22 tok/s off, 38.28
verbose, 1.00x (rounds 0.96-1.03); docs/benchmarks.md has the table. What verbose adds on the decode
path: nothing per token. A 32-token streamed completion at ``-lv 5`` puts two lines in the service's
log (the forwarded ``request_finished`` and the ``request`` line).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import engine_ab  # beside this file (sys.path above)

if __name__ == "__main__":
    tree = str(Path(__file__).resolve().parents[1])
    sys.argv[1:1] = [
        "--tree",
        f"off={tree}",
        "--tree",
        f"verbose={tree}",
        "--env",
        "off:LLAMA_ARG_LOG_VERBOSITY=0",
        "--env",
        "verbose:LLAMA_ARG_LOG_VERBOSITY=5",
    ]
    engine_ab.main()
