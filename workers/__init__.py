"""Worker processes spawned by the service, in three parts:

* :mod:`workers.runtime`: what both workers share (typed emit, event sinks, log, parent watch, wake-up pipe);
* :mod:`workers.download`: ``python -m workers.download``, one process per download job;
* :mod:`workers.inference`: ``python -m workers.inference``, one process per loaded model.

The download and inference workers share only the runtime, and import nothing from the
service but ``service.core`` and ``service.event_store`` (tests/test_architecture.py).
"""

from __future__ import annotations

__all__: list[str] = []
