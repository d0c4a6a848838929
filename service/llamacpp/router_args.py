"""llama-server's router options (command line and environment) -> ``Settings`` overrides.

Precedence, highest first:

1. the command line (llama-server's flags and modelrouter's own);
2. ``MODELROUTER_*`` variables: the more specific name wins, so one shell can
   configure llama-server and modelrouter differently;
3. llama.cpp's variables (``LLAMA_ARG_*``, ``LLAMA_API_KEY``, ``LLAMA_CACHE``...);
4. defaults.

API keys are the exception, as in llama.cpp: ``LLAMA_API_KEY``, ``--api-key``
and ``--api-key-file`` all add keys. Per-model options are not settings: they
become the lowest (environment) and highest (command line) layers of every
model's options (:mod:`service.llamacpp.options`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from service.llamacpp.flags import BY_NAME, FALSEY, TRUTHY, handling, is_falsey
from service.llamacpp.options import per_model


class UsageError(ValueError):
    """A router option llama-server would refuse at start-up (a bad value, an unreadable key file)."""


# Router options that have a MODELROUTER_* twin: the twin beats llama.cpp's variable.
_TWINS: Mapping[str, str] = {
    "host": "MODELROUTER_HOST",
    "port": "MODELROUTER_PORT",
    "models-dir": "MODELROUTER_MODELS_DIR",
    "models-preset": "MODELROUTER_PRESETS",
    "models-max": "MODELROUTER_MODELS_MAX",
    "models-autoload": "MODELROUTER_AUTOLOAD",
    "sse-ping-interval": "MODELROUTER_SSE_KEEPALIVE",
    "log-jsonl": "MODELROUTER_LOG_JSON",
    "timeout": "MODELROUTER_TIMEOUT",
}  # (metrics: MODELROUTER_METRICS, see _router_metrics)
_BOTH = frozenset({"log-verbose", "log-verbosity"})
"""Per-model options the router reads too: its log level (llama.cpp's router passes them to its
children, where they also turn ``__verbose`` on: :mod:`service.llamacpp.options`)."""
_OFFLINE_VARS = ("LLAMA_OFFLINE", "HF_HUB_OFFLINE")  # besides --offline's own LLAMA_ARG_OFFLINE


@dataclass(frozen=True, slots=True)
class RouterArgs:
    """What the router options say: ``Settings`` field overrides, and warnings to log at start."""

    overrides: Mapping[str, Any]  # Settings' keyword overrides: each field has its own type
    warnings: tuple[str, ...] = ()


def _int(key: str, value: str) -> int:
    try:
        return int(value.strip())
    except ValueError:
        msg = f"--{key} {value!r}: expected an integer"
        raise UsageError(msg) from None


def _host(value: str) -> str:
    """Every address of ``--host a,b`` (llama-server's ``parse_csv_row``), each bound: TCP addresses,
    and paths ending in ``.sock`` as UNIX sockets."""
    hosts = [h.strip() for h in value.split(",") if h.strip()]
    if not hosts:
        msg = f"--host {value!r}: --host requires at least one address"
        raise UsageError(msg)
    for host in hosts:
        if "/" in host and not host.endswith(".sock"):
            msg = f"--host {host!r}: a UNIX socket path must end in .sock (as in llama-server)"
            raise UsageError(msg)
    return ",".join(hosts)


def _log_level(value: str) -> str:
    number = _int("log-verbosity", value)
    return "error" if number <= 2 else "info" if number == 3 else "debug"


def _log_colors(value: str) -> str:
    """llama-server's on/off/auto (``is_truthy``/``is_falsey``/``is_autoy``); anything else is its error."""
    lowered = value.strip().lower()
    if lowered in TRUTHY:
        return "on"
    if lowered in FALSEY:
        return "off"
    if lowered in ("auto", "-1"):
        return "auto"
    msg = f"error: unknown value for --log-colors: '{value}'"
    raise UsageError(msg)


_SETTINGS: Mapping[str, tuple[str, Callable[[str], Any]]] = {
    "host": ("host", _host),
    "port": ("port", lambda v: _int("port", v)),
    "models-dir": ("models_dir", lambda v: Path(v).expanduser()),
    "models-preset": ("presets", lambda v: Path(v).expanduser()),
    "models-max": ("models_max", lambda v: _int("models-max", v)),
    "models-autoload": ("autoload", lambda v: not is_falsey(v)),
    "hf-token": ("hf_token", str.strip),
    "offline": ("offline", lambda v: not is_falsey(v)),
    "ssl-key-file": ("ssl_keyfile", Path),
    "ssl-cert-file": ("ssl_certfile", Path),
    "log-verbose": ("log_level", lambda v: "error" if is_falsey(v) else "debug"),
    "log-verbosity": ("log_level", _log_level),
    "log-disable": ("log_level", lambda v: "info" if is_falsey(v) else "off"),  # llama-server pauses its logger
    "log-jsonl": ("log_json", lambda v: not is_falsey(v)),
    "log-file": ("log_file", lambda v: Path(v).expanduser()),
    "log-colors": ("log_colors", _log_colors),
    "log-prefix": ("log_prefix", lambda v: not is_falsey(v)),
    "log-timestamps": ("log_timestamps", lambda v: not is_falsey(v)),
    "sse-ping-interval": ("sse_keepalive", lambda v: float(_int("sse-ping-interval", v))),
    "timeout": ("timeout", lambda v: float(_int("timeout", v))),  # >= 1: Settings checks it
    "hf-repo": ("hf_repo", str.strip),
    "hf-file": ("hf_file", str.strip),
    "model": ("model_file", lambda v: Path(v).expanduser()),
    "mmproj": ("mmproj_file", lambda v: Path(v).expanduser()),
    "alias": ("aliases", lambda v: tuple(a.strip() for a in v.split(",") if a.strip())),
    "cors-origins": ("cors_origins", str.strip),
    "cors-methods": ("cors_methods", str.strip),
    "cors-headers": ("cors_headers", str.strip),
    "cors-credentials": ("cors_credentials", lambda v: not is_falsey(v)),
}


def read_key_file(path: str) -> list[str]:
    """``--api-key-file``: one key per line, lines starting with ``#`` are comments."""
    try:
        lines = Path(path).read_text().splitlines()
    except OSError as exc:
        msg = f"--api-key-file {path}: cannot read it ({exc.strerror or exc})"
        raise UsageError(msg) from None
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def _api_keys(cli: Mapping[str, str], cli_keys: Sequence[str], env: Mapping[str, str]) -> tuple[str, ...]:
    keys = [k.strip() for k in env.get("api-key", "").split(",") if k.strip()]
    for source in (env, cli):
        if source.get("api-key-file"):
            keys += read_key_file(source["api-key-file"])
    keys += list(cli_keys)
    return tuple(dict.fromkeys(keys))


def router_args(
    cli: Mapping[str, str], cli_keys: Sequence[str], env: Mapping[str, str], environ: Mapping[str, str]
) -> RouterArgs:
    """Overrides for ``Settings.from_env`` from llama-server's options given on the
    command line (``cli``, ``cli_keys``) and in the environment (``env``: by option
    key, see :func:`service.llamacpp.command_line.env_options`; ``environ``: the raw variables)."""
    overrides: dict[str, Any] = {}  # Settings' keyword overrides: each field has its own type
    warnings: list[str] = []
    for key in sorted(set(cli) | set(env)):
        arg = BY_NAME.get(key)
        if arg is None or (handling(arg).scope not in ("router", "source") and key not in _BOTH):
            continue
        from_cli = key in cli
        if not from_cli and _TWINS.get(key, "") in environ:
            continue  # MODELROUTER_X beats LLAMA_ARG_X
        value = cli[key] if from_cli else env[key]
        if key in _SETTINGS:
            field, convert = _SETTINGS[key]
            overrides[field] = convert(value)
        elif not handling(arg).honoured:
            warnings.append(f"--{key} is accepted but ignored: {handling(arg).note}")
        else:  # a source option with no router meaning (--mmproj): it belongs in a preset section
            warnings.append(f"--{key} is accepted but ignored on the command line: set it in a preset section")
    keys = _api_keys(cli, cli_keys, env)
    if keys:
        overrides["api_keys"] = keys
    if "offline" not in overrides and any(environ.get(v, "").strip().lower() in TRUTHY for v in _OFFLINE_VARS):
        overrides["offline"] = True
    metrics = _router_metrics(cli, env, environ)
    if metrics is not None:
        overrides["metrics"] = metrics
    if _tools_asked(cli, env) and "cors_origins" not in overrides and "MODELROUTER_CORS_ORIGINS" not in environ:
        overrides["cors_origins"] = "localhost"  # llama-server's default with tools or MCP servers (common/arg.cpp)
    overrides["model_args"] = per_model(cli)
    overrides["model_env_args"] = per_model(env)
    return RouterArgs(overrides=overrides, warnings=tuple(warnings))


def _router_metrics(cli: Mapping[str, str], env: Mapping[str, str], environ: Mapping[str, str]) -> bool | None:
    """``--metrics`` (``LLAMA_ARG_ENDPOINT_METRICS``) turns the router's own ``/metrics`` on, besides
    being every model's option (as llama.cpp's router passes its command line to its children)."""
    if "metrics" in cli:
        return not is_falsey(cli["metrics"])
    if "metrics" in env and "MODELROUTER_METRICS" not in environ:
        return not is_falsey(env["metrics"])
    return None


def _tools_asked(cli: Mapping[str, str], env: Mapping[str, str]) -> bool:
    """Whether ``--tools``, ``--agent`` or MCP servers were asked for: llama-server then limits
    ``--cors-origins`` to ``localhost`` unless given, though none of them is served here (a page
    that expects them gets the stricter CORS it would get from llama-server)."""
    asked = {**env, **cli}
    return (
        any(t.strip() for t in asked.get("tools", "").split(","))
        or any(asked.get(k, "").strip() for k in ("mcp-servers-config", "mcp-servers-json"))
        or ("agent" in asked and not is_falsey(asked["agent"]))
    )


def llama_cache_dir(environ: Mapping[str, str]) -> Path:
    """llama.cpp's model cache (``common/hf-cache.cpp``): ``LLAMA_CACHE``, else
    ``HF_HUB_CACHE``, ``HUGGINGFACE_HUB_CACHE``, ``$HF_HOME/hub``,
    ``$XDG_CACHE_HOME/huggingface/hub``, ``~/.cache/huggingface/hub``."""
    for var, tail in (
        ("LLAMA_CACHE", ()),
        ("HF_HUB_CACHE", ()),
        ("HUGGINGFACE_HUB_CACHE", ()),
        ("HF_HOME", ("hub",)),
        ("XDG_CACHE_HOME", ("huggingface", "hub")),
        ("HOME", (".cache", "huggingface", "hub")),
    ):
        if environ.get(var):
            return Path(environ[var]).expanduser().joinpath(*tail)
    return Path.home() / ".cache" / "huggingface" / "hub"
