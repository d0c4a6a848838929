"""Per-model settings from an INI file, in the spirit of llama.cpp's ``--models-preset``.

    [*]                      ; applied to every section below
    n_threads = 2

    [tiny]
    model = /models/tiny.gguf  ; a local file (optional for downloaded models)
    aliases = small, fast
    n_ctx = 512                ; context per slot
    n_parallel = 2             ; slots decoded together (default 4)
    ttl = 300                  ; seconds idle before unload (reason "idle")
    restart = on-failure       ; or "never" (the default)
    load-on-startup = true
    embedding = false

Start-up turns each section into ``model_configured`` (and ``model_discovered``
for ``model =`` paths) when it differs from what the log already says, so the
settings in force at any time are part of the audit trail.
"""

from __future__ import annotations

import configparser
from pathlib import Path
from typing import Any

from service.core import events as ev
from service.core.state import ModelConfig, RouterState
from service.event_store.codec import NewEvent

_INT_PARAMS = {"n_ctx", "n_threads", "n_threads_batch", "n_batch", "n_parallel", "max_prompt_tokens", "seed"}
_KNOWN = _INT_PARAMS | {"model", "aliases", "ttl", "restart", "load-on-startup", "embedding", "chat_format"}


class PresetError(ValueError):
    """A preset file that cannot be used; the message names the section and key."""


def _bool(section: str, key: str, text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off"}:
        return False
    msg = f"[{section}] {key} = {text!r}: expected true or false"
    raise PresetError(msg)


def parse_presets(text: str) -> dict[str, tuple[ModelConfig, str | None]]:
    """``name -> (config, local model path or None)``. Unknown keys are an error (as in llama.cpp)."""
    parser = configparser.ConfigParser(default_section="*", interpolation=None, inline_comment_prefixes=(";", "#"))
    parser.read_string(text)
    result: dict[str, tuple[ModelConfig, str | None]] = {}
    for name in parser.sections():
        section = parser[name]
        unknown = set(section) - _KNOWN
        if unknown:
            msg = f"[{name}] unknown keys: {sorted(unknown)}"
            raise PresetError(msg)
        params: dict[str, Any] = {}
        for key in _INT_PARAMS & set(section):
            try:
                params[key] = int(section[key])
            except ValueError:
                msg = f"[{name}] {key} = {section[key]!r}: expected an integer"
                raise PresetError(msg) from None
        if "embedding" in section:
            params["embedding"] = _bool(name, "embedding", section["embedding"])
        if "chat_format" in section:
            params["chat_format"] = section["chat_format"]
        restart = section.get("restart", "never").strip()
        if restart not in {"never", "on-failure"}:
            msg = f"[{name}] restart = {restart!r}: expected never or on-failure"
            raise PresetError(msg)
        try:
            ttl = float(section["ttl"]) if "ttl" in section else None
        except ValueError:
            msg = f"[{name}] ttl = {section['ttl']!r}: expected seconds"
            raise PresetError(msg) from None
        config = ModelConfig(
            aliases=tuple(a.strip() for a in section.get("aliases", "").split(",") if a.strip()),
            params=params,
            ttl_seconds=ttl,
            restart=restart,
            load_on_startup=_bool(name, "load-on-startup", section.get("load-on-startup", "false")),
        )
        result[name] = (config, section.get("model"))
    return result


def preset_events(state: RouterState, path: Path) -> list[NewEvent]:
    """Events that make the fold's per-model settings match the preset file."""
    planned: list[NewEvent] = []
    for name, (config, model_path) in parse_presets(path.read_text()).items():
        current = state.models.get(name)
        if model_path:
            file = Path(model_path).expanduser()
            if not file.exists():
                msg = f"[{name}] model = {model_path}: no such file"
                raise PresetError(msg)
            if current is None or current.path != str(file):
                size = file.stat().st_size
                listing = ({"path": str(file), "size": size},)
                planned.append(
                    NewEvent(ev.ModelDiscovered(source="preset", path=str(file), files=listing, size=size), model=name)
                )
        if current is None or current.config != config:
            configured = ev.ModelConfigured(
                aliases=config.aliases,
                params=dict(config.params),
                ttl_seconds=config.ttl_seconds,
                restart=config.restart,
                load_on_startup=config.load_on_startup,
            )
            planned.append(NewEvent(configured, model=name))
    return planned
