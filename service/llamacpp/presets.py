"""Preset files in llama.cpp's format (``--models-preset``, or ``preset.ini`` of an ``-hf`` repo).

    version = 1
    [*]                          ; applied to every model, from every source
    c = 8192
    n-gpu-layers = 8             ; layers on the GPU, as llama-server (a CPU build warns and ignores it)

    [ggml-org/gemma-3-1b-it-GGUF:Q4_K_M]   ; settings for a cached model
    jinja = true
    LLAMA_ARG_CACHE_RAM = 0      ; env names work as keys too

    [tiny]
    model = /models/tiny.gguf    ; a local file (relative paths: from the working directory)
    alias = small, fast
    load-on-startup = true

    [remote]
    hf-repo = user/repo:Q4_K_M   ; downloaded on first use
    ttl = 300                    ; modelrouter's own: seconds idle before unload
    restart = on-failure         ; modelrouter's own: reload after a crash
    hang-timeout = 900           ; modelrouter's own: seconds one step may last before the worker is killed

Keys are llama-server's options without dashes (long or short names) or their
env names, the preset-only keys (``load-on-startup``, ``stop-timeout``,
``dedup-cache-models``) and ``version``; ``no-X`` negates a boolean. Ours:
``ttl``, ``restart``, ``aliases``, ``pin``, ``hang-timeout``, ``cache-disk-max``, ``spec-adaptive``, plus
the parameter names older modelrouter presets used (``n_ctx``, ``n_threads``...). Any other key is a start-up error
naming the file, the section and the key, as in llama.cpp. A section name
``user/repo:tag`` gets its tag upper-cased (llama.cpp's canonical name).

The grammar is llama.cpp's (``common/preset.cpp``): a value ends at the first
``;`` or ``#``; a section opened twice starts over. Pure: text in, values out.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from service.llamacpp.flags import is_falsey, lookup
from service.llamacpp.options import LEGACY_PARAMS, OUR_KEYS
from service.llamacpp.upstream_args import LlamaArg

GLOBAL_SECTION = "*"
DEFAULT_SECTION = "default"  # keys before any header (llama.cpp's COMMON_PRESET_DEFAULT_NAME)
_HEADER = re.compile(r"^\[\s*([^\]]+?)\s*\]\s*(?:[;#].*)?$")
_KEY_VALUE = re.compile(r"^([A-Za-z_][A-Za-z0-9_.\-]*)[ \t]*=[ \t]*([^;#]*?)[ \t]*(?:[;#].*)?$")
_COMMENT_OR_BLANK = re.compile(r"^[ \t]*(?:[;#].*)?$")
_TAG = re.compile(r"[-.]([A-Z0-9_]+)$", re.IGNORECASE)


class PresetError(ValueError):
    """A preset that cannot be used; the message names the file, the section and the key."""


@dataclass(frozen=True, slots=True)
class Section:
    """One section: llama options by canonical key (negations resolved), and our own keys."""

    name: str
    options: Mapping[str, str] = field(default_factory=dict)
    extras: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Preset:
    """A parsed preset file: ``[*]`` and the model sections, in file order."""

    origin: str
    remote: bool = False
    defaults: Section = field(default_factory=lambda: Section(GLOBAL_SECTION))
    sections: tuple[Section, ...] = ()


# llama.cpp's whitelist for presets fetched from a Hub repo (llama-cpp-router.md §4):
# a remote preset must not name local files or turn on server features.
REMOTE_KEYS = frozenset(
    {
        "model-url",
        "hf-repo",
        "hf-repo-draft",
        "hf-repo-v",
        "hf-file-v",
        "mmproj-url",
        "pooling",
        "jinja",
        "batch-size",
        "ubatch-size",
        "cache-reuse",
        "chat-template-kwargs",
        "mmap",
    }
)


def allowed_remotely(arg: LlamaArg) -> bool:
    """Whether a preset fetched with ``-hf`` may set ``arg``: the whitelist plus all sampling options."""
    return arg.sampling or arg.key in REMOTE_KEYS


def canonical_section_name(name: str) -> str:
    """``user/repo:q4_k_m`` -> ``user/repo:Q4_K_M``, as llama.cpp names cached models."""
    if name in (GLOBAL_SECTION, DEFAULT_SECTION) or ":" not in name:
        return name
    head, tag = name.rsplit(":", 1)
    match = _TAG.search(tag)
    return f"{head}:{(match.group(1) if match else tag).upper()}"


def _lines(text: str, origin: str) -> dict[str, dict[str, str]]:
    """Section name -> raw key/values, by llama.cpp's INI grammar."""
    parsed: dict[str, dict[str, str]] = {}
    current = DEFAULT_SECTION
    for number, line in enumerate(re.split(r"\r\n|\n|\r", text), 1):
        stripped = line.strip()
        if _COMMENT_OR_BLANK.match(stripped):
            continue
        if header := _HEADER.match(stripped):
            current = header.group(1)
            parsed[current] = {}  # a section opened again starts over, as in llama.cpp
        elif pair := _KEY_VALUE.match(stripped):
            parsed.setdefault(current, {})[pair.group(1)] = pair.group(2)
        else:
            msg = f"{origin}:{number}: not a section header, key = value, or comment: {line!r}"
            raise PresetError(msg)
    return parsed


def _section(name: str, raw: Mapping[str, str], origin: str, *, remote: bool) -> Section:
    options: dict[str, str] = {}
    extras: dict[str, str] = {}
    for key, value in raw.items():
        if key == "version":
            continue  # reserved by llama.cpp for later formats
        found = lookup(key)
        if found is None:
            if key in OUR_KEYS or key in LEGACY_PARAMS:
                if remote:
                    msg = f"{origin}: [{name}] {key}: not allowed in remote presets"
                    raise PresetError(msg)
                extras[key] = value
                continue
            msg = f"{origin}: [{name}] {key}: unknown key (not a llama-server option, nor one of modelrouter's)"
            raise PresetError(msg)
        arg, negated = found
        if remote and not allowed_remotely(arg):
            msg = f"{origin}: [{name}] {key}: not allowed in remote presets (llama.cpp's whitelist)"
            raise PresetError(msg)
        if arg.kind in ("flag", "bool") and negated:
            value = "1" if is_falsey(value) else "0"
        options[arg.key] = value
    return Section(name, options, extras)


def parse_preset(text: str, origin: str, *, remote: bool = False) -> Preset:
    """Parse a preset file's ``text``; ``origin`` names it in errors. ``remote``
    applies llama.cpp's whitelist for presets fetched from a Hub repo."""
    defaults = Section(GLOBAL_SECTION)
    sections: list[Section] = []
    for raw_name, raw in _lines(text, origin).items():
        name = canonical_section_name(raw_name)
        section = _section(name, raw, origin, remote=remote)
        if name == GLOBAL_SECTION:
            defaults = section
        elif name != DEFAULT_SECTION or section.options or section.extras:
            sections.append(section)
    return Preset(origin=origin, remote=remote, defaults=defaults, sections=tuple(sections))


def read_preset(path: Path, *, remote: bool = False) -> Preset:
    """Read and parse a preset file; a missing or unreadable file is a :class:`PresetError`."""
    try:
        text = path.read_text()
    except OSError as exc:
        msg = f"preset file {path}: {exc.strerror or exc}"
        raise PresetError(msg) from None
    return parse_preset(text, str(path), remote=remote)
