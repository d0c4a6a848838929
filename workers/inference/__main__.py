"""``python -m workers.inference``: the command line is :mod:`workers.inference._cli`'s;
``--list-devices`` (:mod:`workers.inference._list_devices`) prints the devices and exits, without a model.

SIGTERM/SIGINT that arrive while the heavy imports below run (~0.2 s) are
recorded first and replayed by the worker as stop requests once its handlers
exist. Without this, an early stop request would kill the process by the
default action with no ``instance_stopped`` event.
"""

from __future__ import annotations

import signal
import sys

_EARLY_SIGNALS: list[int] = []
if __name__ == "__main__" and "--list-devices" in sys.argv[1:]:
    # Before the worker's imports (its HTTP server, its engines): this only reads llama.cpp's devices.
    from workers.inference._list_devices import main as list_devices

    sys.exit(list_devices(sys.argv[1:]))
if __name__ == "__main__":
    for _sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(_sig, lambda signum, _frame: _EARLY_SIGNALS.append(signum))

from workers.inference._worker import main  # noqa: E402

if __name__ == "__main__":
    main(early_signals=_EARLY_SIGNALS)
