"""``python -m workers.inference``: the command line is :mod:`workers.inference._cli`'s.

SIGTERM/SIGINT that arrive while the heavy imports below run (~0.2 s) are
recorded first and replayed by the worker as stop requests once its handlers
exist. Without this, an early stop request would kill the process by the
default action with no ``instance_stopped`` event.
"""

from __future__ import annotations

import signal

_EARLY_SIGNALS: list[int] = []
if __name__ == "__main__":
    for _sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(_sig, lambda signum, _frame: _EARLY_SIGNALS.append(signum))

from workers.inference._worker import main  # noqa: E402

if __name__ == "__main__":
    main(early_signals=_EARLY_SIGNALS)
