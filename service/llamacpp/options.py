"""llama-server options -> one model's settings: the merge and the translation, pure.

llama.cpp's precedence for a model's options, lowest first: the ``LLAMA_ARG_*``
environment (children inherit it), the preset's ``[*]``, the model's own
section (or what its source implies), then the router's command line, which
it overlays on every model. :func:`merge` applies that order;
:func:`model_settings` turns the result into a ``ModelConfig``: honoured
options become inference-worker parameters (``ctx-size`` -> ``n_ctx``), the
others are listed in ``ignored``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import service.llamacpp.sampling_defaults as sampling_defaults
from service.core import launch
from service.core import launch_rows as rows
from service.core.event_base import JSON
from service.core.launch_speculative import spec_types
from service.core.memory import CACHE_TYPE_BYTES
from service.core.state import ModelConfig
from service.llamacpp.flags import BY_NAME, CHAT_FORMATS, TRUTHY, handling, is_falsey
from service.llamacpp.option_values import OptionError as OptionError
from service.llamacpp.option_values import finite_number, integer, json_object_text, one_of, seconds, switch

Converted = dict[str, JSON]  # free-form: worker parameters as the log records them (launch.Params)
"""The worker parameters an option sets (``{"n_ctx": 4096}``), read by ``InferenceLaunch.from_params``."""
Options = Mapping[str, str]
"""llama-server options by canonical key (``ctx-size``), values as written."""

OUR_KEYS = frozenset({"ttl", "restart", "aliases", "pin", "hang-timeout", "cache-disk-max", "spec-adaptive"})
"""modelrouter's own preset keys."""
LEGACY_PARAMS: Mapping[str, type] = {
    "n_ctx": int,
    "n_threads": int,
    "n_threads_batch": int,
    "n_batch": int,
    "n_parallel": int,
    "max_prompt_tokens": int,
    "chat_format": str,
}
"""Worker parameters by name, as older modelrouter presets wrote them (still ours)."""


@dataclass(frozen=True, slots=True)
class ModelSettings:
    """What a model's merged options say: its config, and its source keys."""

    config: ModelConfig
    model_path: str | None = None
    mmproj: str | None = None
    dedup: bool = False


def merge(layers: Sequence[Options]) -> dict[str, str]:
    """Later layers win, key by key (llama.cpp's ``common_preset::merge``)."""
    merged: dict[str, str] = {}
    for layer in layers:
        merged.update(layer)
    return merged


def per_model(options: Options) -> dict[str, str]:
    """Only the options a router passes on to every model (no router, source or preset keys):
    llama.cpp strips the reserved ones from its own command line before its children see it."""
    return {k: v for k, v in options.items() if k in BY_NAME and handling(BY_NAME[k]).scope == "model"}


def command_line(options: Options) -> list[str]:
    """A model's options as llama-server's command line (``GET /models`` ``status.args``):
    the main spelling of each, a boolean as itself or its negation; preset-only keys left out."""
    argv: list[str] = []
    for key, value in sorted(options.items()):
        arg = BY_NAME.get(key)
        if arg is None or arg.preset_only:
            continue
        if arg.kind in ("flag", "bool"):
            if not is_falsey(value):
                argv.append(arg.names[-1])
            elif arg.negations:
                argv.append(arg.negations[-1])
        else:
            argv += [arg.names[-1], value]
    return argv


_NOT_IN_LISTED_PRESET = frozenset({"alias", "tags", "host", "port"})  # unset by llama.cpp before listing


def preset_ini(name: str, options: Options) -> str:
    """A model's options as llama.cpp shows them in ``GET /models`` ``status.preset``
    (``common_preset::to_ini``): its section, one ``key = value`` line per option."""
    lines = [f"[{name}]"]
    for key, value in sorted(options.items()):
        if key in BY_NAME and key not in _NOT_IN_LISTED_PRESET:
            lines.append(f"{key} = " + value.replace("\n", "\\\n"))
    return "\n".join(lines) + "\n\n"


def model_tags(options: Options) -> list[str]:
    """``--tags a,b`` as llama.cpp lists them in ``GET /models``: stripped, unique, sorted."""
    return sorted({tag.strip() for tag in options.get("tags", "").split(",") if tag.strip()})


REASONING_FORMATS = tuple(rows.REASONING_FORMATS)  # llama-server's --reasoning-format


def _positive(param: str) -> Callable[[str, str], Converted]:
    def convert(key: str, value: str) -> Converted:
        number = integer(key, value)
        return {param: number} if number > 0 else {}  # <= 0: llama.cpp's "auto", the worker's default

    return convert


def _parallel(key: str, value: str) -> Converted:
    number = integer(key, value)
    if number == 0:
        msg = f"{key} = 0: invalid value for n_parallel (-1 = auto)"
        raise OptionError(msg)
    return {"n_parallel": number} if number > 0 else {}


_POOLINGS = tuple(rows.POOLING)
KV_CACHE_TYPES = tuple(CACHE_TYPE_BYTES)  # llama-server's kv_cache_types
ROPE_SCALINGS = tuple(rows.ROPE_SCALING)
LOAD_MODES = tuple(rows.LOAD_MODES)  # llama-server's --load-mode


def _flash_attn(key: str, value: str) -> Converted:
    try:
        mode = rows.flash_attn(value)  # llama.cpp's words, `-1` for auto included
    except ValueError:
        msg = f"{key} = {value!r}: expected on, off or auto"
        raise OptionError(msg) from None
    return {} if mode == "auto" else {"flash_attn": mode}  # auto: the worker's default, llama.cpp's


def _rope_scale(key: str, value: str) -> Converted:
    factor = finite_number(key, value)
    if factor <= 0:
        msg = f"{key} = {value!r}: expected a factor above 0"
        raise OptionError(msg)
    return {"rope_freq_scale": 1.0 / factor}  # as llama-server: expands the context N times


def _number(param: str) -> Callable[[str, str], Converted]:
    return lambda k, v: {param: finite_number(k, v)}


def _pooling(key: str, value: str) -> Converted:
    if value.strip() not in _POOLINGS:
        msg = f"{key} = {value!r}: expected one of {', '.join(_POOLINGS)}"
        raise OptionError(msg)
    return {"pooling": value.strip()}


_CONVERT: Mapping[str, Callable[[str, str], Converted]] = {
    "ctx-size": lambda k, v: {"n_ctx": integer(k, v)},
    "threads": _positive("n_threads"),
    "threads-batch": _positive("n_threads_batch"),
    "batch-size": _positive("n_batch"),
    "seed": lambda k, v: {"seed": integer(k, v)},
    "embeddings": lambda _k, v: {} if is_falsey(v) else {"embedding": True},
    "pooling": _pooling,
    "reranking": lambda _k, v: {} if is_falsey(v) else {"embedding": True, "pooling": "rank"},
    "kv-unified": lambda _k, v: {"kv_unified": not is_falsey(v)},
    "cache-ram": lambda k, v: {"cache_ram": integer(k, v)},
    "ubatch-size": _positive("n_ubatch"),
    "flash-attn": _flash_attn,
    "cache-type-k": lambda k, v: {"cache_type_k": one_of(k, v.lower(), KV_CACHE_TYPES)},
    "cache-type-v": lambda k, v: {"cache_type_v": one_of(k, v.lower(), KV_CACHE_TYPES)},
    "swa-full": lambda _k, v: {} if is_falsey(v) else {"swa_full": True},
    "warmup": lambda _k, v: {"warmup": False} if is_falsey(v) else {},
    "rope-scaling": lambda k, v: {"rope_scaling": one_of(k, v, ROPE_SCALINGS)},
    "rope-scale": _rope_scale,
    "rope-freq-base": _number("rope_freq_base"),
    "rope-freq-scale": _number("rope_freq_scale"),
    "yarn-orig-ctx": lambda k, v: {"yarn_orig_ctx": integer(k, v)},
    "yarn-ext-factor": _number("yarn_ext_factor"),
    "yarn-attn-factor": _number("yarn_attn_factor"),
    "yarn-beta-slow": _number("yarn_beta_slow"),
    "yarn-beta-fast": _number("yarn_beta_fast"),
    "load-mode": lambda k, v: {"load_mode": one_of(k, v, LOAD_MODES)},
    "lazy-mode": lambda k, v: {"lazy_mode": one_of(k, v, ("on", "auto", "off"))},
    "repack": lambda _k, v: {"repack": False} if is_falsey(v) else {},
    "no-host": lambda _k, v: {} if is_falsey(v) else {"no_host": True},
    "check-tensors": lambda _k, v: {} if is_falsey(v) else {"check_tensors": True},
    "mlock": lambda _k, v: {} if is_falsey(v) else {"mlock": True},
    "mmap": lambda _k, v: {"mmap": False} if is_falsey(v) else {},
    "cache-idle-slots": lambda _k, v: {"cache_idle_slots": not is_falsey(v)},
    "context-shift": lambda _k, v: {"context_shift": not is_falsey(v)},
    "spm-infill": lambda _k, v: {"spm_infill": not is_falsey(v)},
    "slot-save-path": lambda _k, v: {"slot_save_path": v.strip()},
    "log-prompts-dir": lambda _k, v: {"log_prompts_dir": v.strip()},
    "lora": lambda _k, v: {"lora": v.strip()},
    "lora-scaled": lambda _k, v: {"lora_scaled": v.strip()},
    "lora-init-without-apply": lambda _k, v: {"lora_init_without_apply": not is_falsey(v)},
    "props": lambda _k, v: {"endpoint_props": not is_falsey(v)},
    "parallel": _parallel,
    "metrics": lambda _k, v: {} if is_falsey(v) else {"endpoint_metrics": True},  # llama-server: off by default
    "slots": lambda _k, v: {"endpoint_slots": False} if is_falsey(v) else {},  # llama-server: on by default
    "sleep-idle-seconds": lambda _k, _v: {},  # the router's own: ModelConfig.sleep_idle_seconds
    "chat-template-file": lambda _k, v: {"chat_template_file": v.strip()},
    "chat-template-kwargs": lambda k, v: {"chat_template_kwargs": json_object_text(k, v)},
    "reasoning-format": lambda k, v: {"reasoning_format": one_of(k, v, REASONING_FORMATS)},
    "log-verbose": lambda _k, v: {} if is_falsey(v) else {"verbose": True},  # -v: verbosity INT_MAX
    "log-verbosity": lambda k, v: {"verbose": True} if integer(k, v) > 9 else {},  # a request's verbose: > 9
    "jinja": lambda _k, v: {"jinja": False} if is_falsey(v) else {},
    "video-fps": lambda k, v: {"video_fps": finite_number(k, v)},
    "video-timestamp-interval": lambda k, v: {"video_timestamp_interval": integer(k, v)},
    "video-ffmpeg-dir": lambda _k, v: {"video_ffmpeg_dir": v.strip()} if v.strip() else {},
    "spec-default": lambda _k, _v: {},  # a flag over --spec-type: translate() adds ngram-mod once all is read
}
# Honoured only for some values: (key, value) -> whether modelrouter does what it asks.
_CONDITIONAL: Mapping[str, Callable[[str], bool]] = {
    "cont-batching": lambda v: not is_falsey(v),
    "chat-template": lambda v: bool(v.strip()),  # a built-in name, else the template's text
    "tags": lambda _v: True,  # the router's: GET /models lists them (model_tags)
    "hf-repo-draft": lambda _v: True,  # the service downloads it; the worker gets its file as -md
}


def _from_table(key: str, value: str) -> Converted:
    """An option as the launch's table declares it: a switch by llama.cpp's truthy and falsey words, a
    value parsed by its row (left out when it is the worker's default, which needs no flag)."""
    name = launch.BY_KEY[key]
    row, default = launch.ROWS[name], launch.DEFAULTS[name]
    if row.kind in ("switch", "unswitch", "both"):
        on = not is_falsey(value)
        return {} if on == default else {name: on}
    try:
        parsed = row.parse(value.strip())
    except ValueError as exc:  # a normaliser's own words (llama.cpp's: --reasoning), else the type expected
        why = str(exc) if row.parse not in (int, float, str) else f"expected {row.parse.__name__} (--{key})"
        msg = f"{key} = {value!r}: {why}"
        raise OptionError(msg) from None
    if row.choices is not None and parsed not in row.choices:
        msg = f"{key} = {value!r}: expected one of {', '.join(row.choices)}"
        raise OptionError(msg)
    return {} if parsed == default else {name: parsed}


def translate(options: Options) -> tuple[Converted, tuple[str, ...]]:
    """``(worker params, ignored keys)`` for a model's merged per-model options."""
    params: Converted = {}
    ignored: list[str] = []
    for key, value in sorted(options.items()):
        arg = BY_NAME.get(key)
        if arg is None or handling(arg).scope != "model":
            continue
        if handling(arg).refused:  # llama.cpp removed it; llama-server refuses to start, in these words
            msg = f"{key}: {arg.help}"
            raise OptionError(msg)
        if key in _CONVERT:
            params.update(_CONVERT[key](key, value))
        elif sampling_defaults.field_of(key) is not None:  # server-side request defaults, one object
            try:
                params.setdefault("sampling", {}).update(sampling_defaults.convert(key, value))
            except ValueError as exc:
                raise OptionError(str(exc)) from None
        elif key in _CONDITIONAL:
            if not _CONDITIONAL[key](value):
                ignored.append(key)
            elif key == "chat-template":
                name = value.strip()
                params.update({"chat_format": CHAT_FORMATS[name]} if name in CHAT_FORMATS else {"chat_template": value})
        elif key in launch.BY_KEY:  # an option the launch's table names is a value of its row
            params.update(_from_table(key, value))
        else:
            ignored.append(key)
    if not is_falsey(options.get("spec-default", "0")):
        params["spec_type"] = _with_ngram_mod(str(params.get("spec_type", "none")))
    return params, tuple(ignored)


def _with_ngram_mod(types: str) -> str:
    """``--spec-default``: ngram-mod beside the types given (its sizes are the rows' defaults, llama.cpp's
    ``--spec-default`` values, unless set). A ``none`` given too is dropped: in llama.cpp's list it is inert."""
    return spec_types(",".join([*(t for t in types.split(",") if t != "none"), "ngram-mod"]))


def _legacy(extras: Mapping[str, str]) -> Converted:
    params: Converted = {}
    for key, kind in {**LEGACY_PARAMS, "cache-disk-max": int}.items():  # and ours: bytes of saved prompt cache
        if key in extras:
            params[key.replace("-", "_")] = integer(key, extras[key]) if kind is int else extras[key].strip()
    if "spec-adaptive" in extras:  # ours: adaptive drafting (issue 33), a switch
        params["spec_adaptive"] = switch("spec-adaptive", extras["spec-adaptive"])
    return params


def _restart(extras: Mapping[str, str]) -> str:
    restart = extras.get("restart", "never").strip()
    if restart not in ("never", "on-failure"):
        msg = f"restart = {restart!r}: expected never or on-failure"
        raise OptionError(msg)
    return restart


def _stop_timeout(value: str | None) -> float | None:
    # llama.cpp warns about a bad value and keeps its default: so do we (None = the default).
    try:
        return float(int(value.strip())) if value is not None else None
    except ValueError:
        return None


def _sleep(value: str | None) -> float | None:
    """``--sleep-idle-seconds``: -1 (the default) never; 0 or below -1 refused, as llama-server refuses them."""
    if value is None:
        return None
    seconds = integer("sleep-idle-seconds", value)
    if seconds == 0 or seconds < -1:
        msg = f"sleep-idle-seconds = {value!r}: invalid value: cannot be 0 or less than -1"
        raise OptionError(msg)
    return None if seconds == -1 else float(seconds)


def _names(*texts: str | None) -> tuple[str, ...]:
    seen: dict[str, None] = {}
    for text in texts:
        for name in (text or "").split(","):
            if name.strip():
                seen[name.strip()] = None
    return tuple(seen)


def model_settings(options: Options, extras: Mapping[str, str], *, aliases: Sequence[str] = ()) -> ModelSettings:
    """One model's settings from its merged ``options`` and modelrouter's own ``extras``.
    Raises :class:`OptionError` for a value llama-server would refuse."""
    params, ignored = translate(options)
    params.update(_legacy(extras))
    stop = options.get("stop-timeout")
    config = ModelConfig(
        aliases=_names(options.get("alias"), extras.get("aliases"), ",".join(aliases)),
        params=params,
        ttl_seconds=seconds(extras, "ttl"),
        restart=_restart(extras),
        load_on_startup=options.get("load-on-startup", "").strip().lower() in TRUTHY,  # llama.cpp's is_truthy
        args=dict(sorted(options.items())),
        ignored=ignored,
        hf_repo=(options.get("hf-repo") or "").strip() or None,
        hf_file=(options.get("hf-file") or "").strip() or None,
        stop_timeout=_stop_timeout(stop),
        sleep_idle_seconds=_sleep(options.get("sleep-idle-seconds")),
        pinned=extras.get("pin", "").strip().lower() in TRUTHY,  # ours: never evicted (docs/llama-cpp-compat.md)
        hang_timeout=seconds(extras, "hang-timeout", at_least=0, what="seconds (0: never give the worker up as hung)"),
    )
    return ModelSettings(
        config=config,
        model_path=(options.get("model") or "").strip() or None,
        mmproj=(options.get("mmproj") or "").strip() or None,
        dedup=options.get("dedup-cache-models", "").strip().lower() in TRUTHY,  # llama.cpp's is_truthy
    )
