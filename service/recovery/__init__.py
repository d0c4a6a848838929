"""Restart-safe recovery: rebuilding the fold from snapshot + tail, writing
snapshots, and ``modelrouter verify``.

``service.recovery.verify`` is the *module* (the CLI uses its ``add_arguments``
and ``run``); the check itself is ``service.recovery.verify.verify``."""

from __future__ import annotations

from service.recovery import verify
from service.recovery.rebuild import RebuildResult, rebuild_state
from service.recovery.snapshotter import Snapshotter
from service.recovery.verify import CheckResult, VerifyReport

__all__ = ["CheckResult", "RebuildResult", "Snapshotter", "VerifyReport", "rebuild_state", "verify"]
