"""llama-server's slot, LoRA and props administration routes, on the batch engine.

* ``POST /slots/{id}?action=save|restore|erase`` (with ``--slot-save-path``):
  :func:`slot_action`, run between steps (:mod:`workers.inference.engine._slot_files`).
* ``GET /lora-adapters`` → ``[{"id","path","scale","task_name","prompt_prefix"}]``;
  ``POST /lora-adapters`` ``[{"id","scale"}]`` (adapters not named get scale 0)
  → ``{"success": true}``, applied once every slot is idle.
* ``POST /props``: llama-server's: ``{"success": true}`` with ``--props`` (it
  changes nothing there either), else 501.
"""

from __future__ import annotations

import json
import os
from typing import Any
from urllib.parse import parse_qs

from workers.inference.engine import SlotAction
from workers.inference.http._errors import ApiError
from workers.inference.http._json import JsonObject

_NOT_SUPPORTED = "not_supported_error"


def valid_filename(name: str) -> bool:
    """llama.cpp's ``fs_validate_filename`` in short: one plain file name, no directories."""
    bad = any(c in name for c in '/\\:*?"<>|') or any(ord(c) < 32 for c in name)
    return 0 < len(name.encode()) <= 255 and name not in (".", "..") and not bad and name.strip() == name


def slot_action(engine: Any, save_dir: str | None, path: str, route: str, body: JsonObject) -> Any:
    """``POST /slots/{id}?action=…`` on ``engine`` (the batch engine: the caller checked)."""
    if not save_dir:
        msg = "This server does not support slots action. Start it with `--slot-save-path`"
        raise ApiError(501, msg, _NOT_SUPPORTED)
    tail = route[len("/slots/") :]
    if not tail.isdigit():
        raise ApiError(400, "Invalid slot ID")
    query = parse_qs(path.split("?", 1)[1] if "?" in path else "")
    action = (query.get("action") or [""])[0]
    act = SlotAction(action, int(tail))
    if action in ("save", "restore"):
        name = body.get("filename")
        if not isinstance(name, str) or not valid_filename(name):
            raise ApiError(400, "Invalid filename")
        act.filename, act.path = name, os.path.join(save_dir, name)
    return engine.run_slot_action(act)


def set_lora(engine: Any, front: Any, raw: bytes) -> Any:
    """``POST /lora-adapters``: new scales for the adapters ``--lora`` loaded."""
    from workers.inference.llama import LoraError

    try:
        body = json.loads(raw or b"null")
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ApiError(400, f"request body is not valid JSON: {exc}") from None
    try:
        scales = front.llm.lora.scales_for(body)
    except LoraError as exc:
        raise ApiError(400, str(exc)) from None
    return engine.run_slot_action(SlotAction("lora", -1, scales=tuple(scales)))


def post_props(enabled: bool) -> JsonObject:
    if not enabled:
        msg = "This server does not support changing global properties. Start it with `--props`"
        raise ApiError(501, msg, _NOT_SUPPORTED)
    return {"success": True}
