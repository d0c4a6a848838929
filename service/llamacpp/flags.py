"""What modelrouter does with each llama-server option: the decisions behind the generated table.

:mod:`service.llamacpp.upstream_args` lists every option llama-server accepts, read from
llama.cpp's ``arg.cpp``. This module says how each one is handled, in four
scopes:

* ``router``: configures the router process itself (``--port``, ``--api-key``,
  ``--models-max``...). Honoured options change :class:`~service.settings.Settings`;
  the others are accepted and warned about once at start.
* ``source``: names a model's files (``-m``, ``-hf``, ``--mmproj``, ``--alias``).
  On the command line they make the single model of llama-server's
  single-model mode; in a preset section they are that model's source.
* ``model``: a per-model setting, as llama.cpp's router passes it to every
  child. Honoured ones become a worker parameter (``-c`` -> ``n_ctx``); the
  others are accepted, warned about once, and recorded in
  ``model_configured.ignored``: the worker (llama-cpp-python) cannot apply them.
* ``preset``: keys of preset files only (``load-on-startup``, ``stop-timeout``,
  ``dedup-cache-models``).

Anything llama-server does not know is an error, as in llama-server: a usage
error on the command line, a start-up error in a preset.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from service.core.launch import BY_KEY, ROWS
from service.llamacpp.sampling_defaults import field_of
from service.llamacpp.upstream_args import LLAMA_ARGS, LlamaArg

Scope = Literal["router", "source", "model", "preset"]

# Flags llama.cpp replaced by --load-mode in the release llama-cpp-python 0.3.36
# vendors, still on many command lines and in preset files (and ``mmap`` is on
# llama.cpp's remote-preset whitelist): accepted as llama-server used to accept them.
LEGACY_ARGS: tuple[LlamaArg, ...] = (
    LlamaArg(
        ("--mlock",),
        (),
        "flag",
        "",
        "LLAMA_ARG_MLOCK",
        "force the system to keep the model in RAM (older llama.cpp; now --load-mode mlock)",
        server_specific=False,
        sampling=False,
        speculative=False,
        preset_only=False,
    ),
    LlamaArg(
        ("--mmap",),
        ("--no-mmap",),
        "bool",
        "",
        "LLAMA_ARG_MMAP",
        "memory-map the model (older llama.cpp; now --load-mode)",
        server_specific=False,
        sampling=False,
        speculative=False,
        preset_only=False,
    ),
)

ARGS: tuple[LlamaArg, ...] = LLAMA_ARGS + LEGACY_ARGS
"""Every option modelrouter accepts under llama-server's names."""


@dataclass(frozen=True, slots=True)
class Handling:
    """How one option is handled: its scope, whether modelrouter honours it, and why or how."""

    scope: Scope
    honoured: bool
    note: str
    param: str | None = None  # the inference worker parameter a ``model`` option sets
    refused: bool = False  # llama.cpp removed it: given anywhere, the service refuses to start, as llama-server


_ROUTER: Mapping[str, str] = {
    "usage": "prints this help",
    "version": "prints modelrouter's version",
    "cache-list": "lists the models in the model caches, then exits",
    "list-devices": "prints the devices llama.cpp offloads to, as llama-server does (read by the inference worker's "
    "libraries in a child process: `python -m workers.inference --list-devices`), then exits",
    "host": "bind addresses, comma-separated: each one is bound (a path ending in .sock: a UNIX socket)",
    "port": "bind port",
    "models-dir": "directory of local GGUF models (a source, re-read on reload)",
    "models-preset": "INI file of model presets (a source, re-read on reload)",
    "models-max": "loaded models at once (0 = unlimited); downloads never take a slot",
    "models-autoload": "load a model on its first request",
    "hf-token": "Hub token (also HF_TOKEN)",
    "api-key": "required on every endpoint but /health (repeatable, comma-separated)",
    "api-key-file": "file of API keys, one per line, # comments",
    "offline": "start-up and -hf resolution stay off the network (the caches answer); "
    "an explicit POST /models still downloads, as in llama.cpp's router",
    "cors-origins": "CORS origins (*, a list, or localhost), answered as llama-server answers them",
    "cors-methods": "a preflight's Access-Control-Allow-Methods",
    "cors-headers": "a preflight's Access-Control-Allow-Headers",
    "cors-credentials": "Access-Control-Allow-Credentials; with * origins the Origin is echoed",
    "ssl-key-file": "TLS private key (served by uvicorn)",
    "ssl-cert-file": "TLS certificate (served by uvicorn)",
    "log-disable": "no log at all, on the console or in --log-file (llama-server pauses its logger)",
    "log-jsonl": "JSON log lines",
    "log-file": "the service's log, workers' forwarded lines included, also appended to the file (a router's "
    "with each worker's prefix, as llama.cpp's router prefixes its children's; single-model mode's model's "
    "lines bare, as llama-server prints them)",
    "log-colors": "colours on the console log (auto: when stderr is a terminal)",
    "log-prefix": "each console line starts with its level (the console format shows it by default)",
    "log-timestamps": "each console line carries its time (the console format shows it by default; JSON lines always)",
    "sse-ping-interval": "seconds of silence before an SSE keep-alive comment",
    "timeout": "read/write timeout in seconds (default 600, as llama-server): a client's request body and a "
    "client that takes no answer on the service's port, and an answer's next bytes from a worker",
}
_ROUTER_IGNORED: Mapping[str, str] = {
    "completion-bash": "no bash completion script",
    "reuse-port": "one service binds the port",
    "path": "no static files are served",
    "api-prefix": "the API is served at the root",
    "webui": "no web UI",
    "webui-config": "no web UI",
    "webui-config-file": "no web UI",
    "webui-mcp-proxy": "no MCP CORS proxy: /cors-proxy answers llama-server's 403 (feature disabled) either way",
    "tools": "no built-in agent tools: /tools answers llama-server's 403; CORS origins default to localhost",
    "tools-runtime": "no built-in agent tools",
    "mcp-servers-config": "no MCP servers; CORS origins default to localhost, as in llama-server",
    "mcp-servers-json": "no MCP servers; CORS origins default to localhost, as in llama-server",
    "agent": "no built-in agent tools; CORS origins default to localhost, as in llama-server",
    "threads-http": "one asyncio event loop serves HTTP",
    "media-path": "no local media files are served",
}
_SOURCE: Mapping[str, tuple[bool, str]] = {
    "model": (True, "a local GGUF: on the command line llama-server's single-model mode, in a preset its file"),
    "hf-repo": (
        True,
        "a Hub repo: its preset.ini runs as the router's preset, else its GGUF is the model (downloaded on first use)",
    ),
    "hf-file": (True, "the file of --hf-repo to use"),
    "alias": (True, "aliases of the single model (command line) or of the preset's model"),
    "mmproj": (
        True,
        "the model's multimodal projector: its worker evaluates images, audio and video "
        "(GET /models lists image and audio input, as llama.cpp's router)",
    ),
    "model-url": (False, "downloads come from the Hub only (-hf / hf-repo)"),
    "docker-repo": (False, "downloads come from the Hub only (-hf / hf-repo)"),
}
_PRESET: Mapping[str, tuple[bool, str]] = {
    "load-on-startup": (True, "load the model when the service starts"),
    "stop-timeout": (
        True,
        "seconds from the stop request to SIGKILL for this model (else MODELROUTER_STOP_TIMEOUT); at least 8 s "
        "while its worker saves its prompt cache (--cache-disk-max > 0)",
    ),
    "dedup-cache-models": (True, "hide the cache entry that this preset's hf-repo resolves to"),
}
_MODEL: Mapping[str, tuple[str, str]] = {
    "ctx-size": ("n_ctx", "context size"),
    "threads": (
        "n_threads",
        "generation threads; default every core the worker may use (on 2 cores -t 1 measured 0.6-0.7x the "
        "tokens/s of -t 2: docs/benchmarks.md, thread placement)",
    ),
    "threads-batch": ("n_threads_batch", "prompt-processing threads; default: -t"),
    "batch-size": ("n_batch", "logical batch size"),
    "seed": ("seed", "RNG seed of every request that sets none, as in llama-server (GET /props shows it)"),
    "embeddings": ("embedding", "/embedding and /v1/embeddings pooled in the model's own context"),
    "pooling": ("pooling", "pooling of embeddings (none, mean, cls, last, rank; default: the model's)"),
    "reranking": ("embedding", "serve /rerank (with --embedding --pooling rank, as llama-server)"),
    "context-shift": (
        "context_shift",
        "a full context drops the oldest tokens after n_keep; without it, a length stop",
    ),
    "spm-infill": ("spm_infill", "/infill puts the suffix first"),
    "slot-save-path": ("slot_save_path", "directory of the files POST /slots/{id}?action=save and restore use"),
    "log-prompts-dir": (
        "log_prompts_dir",
        "each completion's prompt (a chat's rendered one) to <dir>/<ms>.txt, as llama-server writes it",
    ),
    "lora": (
        "lora",
        "LoRA adapters (comma-separated), the worker's scales for requests without their own `lora`; "
        "GET/POST /lora-adapters",
    ),
    "lora-scaled": ("lora_scaled", "LoRA adapters with their scales (FNAME:SCALE,...)"),
    "lora-init-without-apply": (
        "lora_init_without_apply",
        "adapters load at scale 0 (then POST /lora-adapters)",
    ),
    "props": ("endpoint_props", "POST /props answers success (it changes nothing, as llama-server's)"),
    "kv-unified": (
        "kv_unified",
        "one KV pool for all slots (each may fill -c), the default with -np auto; without it each slot has -c / -np",
    ),
    "parallel": ("n_parallel", "slots decoded together (-1 = auto: 4 slots sharing one KV pool, as llama-server)"),
    "chat-template": (
        "chat_format",
        "a built-in template name llama-cpp-python knows (chatml, llama2, ...), else the Jinja template's text",
    ),
    "chat-template-file": ("chat_template_file", "the Jinja chat template (else the GGUF's, else ChatML)"),
    "chat-template-kwargs": ("chat_template_kwargs", "extra template variables (JSON object)"),
    "reasoning-format": ("reasoning_format", "none, auto, deepseek or deepseek-legacy: where <think> goes"),
    "jinja": ("jinja", "Jinja templates (default); --no-jinja: llama.cpp's built-in templates through its C API"),
    "ubatch-size": ("n_ubatch", "physical maximum batch size (512)"),
    "flash-attn": ("flash_attn", "Flash Attention on, off or auto (llama.cpp decides; the default)"),
    "cache-type-k": ("cache_type_k", "KV cache data type for K (f16; a quantized V needs Flash Attention)"),
    "cache-type-v": ("cache_type_v", "KV cache data type for V (f16); placement counts the smaller cache"),
    "swa-full": ("swa_full", "sliding-window layers keep every cell (prefix reuse further back, more memory)"),
    "warmup": ("warmup", "an empty run before ready; --no-warmup skips it"),
    "rope-scaling": ("rope_scaling", "RoPE frequency scaling method (none, linear, yarn)"),
    "rope-scale": ("rope_freq_scale", "RoPE context scaling factor N: rope-freq-scale 1/N"),
    "rope-freq-base": ("rope_freq_base", "RoPE base frequency (default: the model's)"),
    "rope-freq-scale": ("rope_freq_scale", "RoPE frequency scaling factor (default: the model's)"),
    "yarn-orig-ctx": ("yarn_orig_ctx", "YaRN: original context size (0: the training context)"),
    "yarn-ext-factor": ("yarn_ext_factor", "YaRN: extrapolation mix factor"),
    "yarn-attn-factor": ("yarn_attn_factor", "YaRN: attention magnitude scale"),
    "yarn-beta-slow": ("yarn_beta_slow", "YaRN: high correction dim or alpha"),
    "yarn-beta-fast": ("yarn_beta_fast", "YaRN: low correction dim or beta"),
    "load-mode": ("load_mode", "how the weights are loaded: auto (mmap), none, mmap, mlock, mmap+mlock, dio"),
    "lazy-mode": ("lazy_mode", "tensors read from disk on demand: on, auto, off"),
    "repack": ("repack", "weight repacking for this CPU's kernels; --no-repack keeps the file's layout"),
    "no-host": ("no_host", "bypass the host buffer"),
    "check-tensors": ("check_tensors", "check the tensors' data for invalid values while loading"),
    "mlock": ("mlock", "older llama.cpp's: --load-mode mmap+mlock (mlock with --no-mmap)"),
    "mmap": ("mmap", "older llama.cpp's: --no-mmap is --load-mode none"),
    "cache-ram": (
        "cache_ram",
        "RAM prompt cache of slots' KV state, MiB (8192; -1 no limit, 0 off): a prompt a slot lost comes back from it",
    ),
    "cache-idle-slots": (
        "cache_idle_slots",
        "idle slots go to the prompt cache when a request starts, and leave a unified KV pool (needs --cache-ram)",
    ),
    "cont-batching": ("", "the batch engine always batches; --no-cont-batching is ignored"),
    "tags": ("", "the model's tags in GET /models (informational, not used for routing)"),
    "hf-repo-draft": ("", "draft-simple's model from the Hub: downloaded on first load, its file the worker's -md"),
    "spec-default": (
        "",
        "adds ngram-mod to --spec-type with its default sizes (match 24, draft 48 to 64); a size set "
        "explicitly wins wherever it is given (llama.cpp: the later option wins)",
    ),
    "metrics": (
        "endpoint_metrics",
        "GET /metrics answers (the router's series; the model's llamacpp:* ones); else 501, as llama-server",
    ),
    "slots": ("endpoint_slots", "GET /slots answers; --no-slots: 501, as llama-server"),
    "video-fps": ("video_fps", "frames per second taken from a video (<= 0: all of its own); ffmpeg cuts them"),
    "video-timestamp-interval": (
        "video_timestamp_interval",
        "milliseconds between the timestamp texts put between a video's frames (<= 0: none)",
    ),
    "video-ffmpeg-dir": ("video_ffmpeg_dir", "directory of the ffmpeg and ffprobe that read videos (default: PATH)"),
    "log-verbose": (
        "verbose",
        "debug logging; every model's OpenAI answers carry llama-server's __verbose (a request's `verbose` "
        "decides its own)",
    ),
    "log-verbosity": (
        "verbose",
        "log level: 0-2 errors, 3 info, 4+ debug; above 9 every model's OpenAI answers carry __verbose, as -v",
    ),
    "sleep-idle-seconds": (
        "",
        "idle this long, the model sleeps (its worker stops); the next request wakes it (GET /models: sleeping)",
    ),
}
_SAMPLING = "a GPU backend's sampling; the worker samples on the CPU"
_SAMPLING_DEFAULT = "the default of every request that does not set it, as in llama-server (GET /props shows it)"
_DRAFT_AS_TARGET = "as for the target model: the inference worker (llama-cpp-python) does not take it"
REMOVED = "the argument has been removed"  # llama.cpp's arg_removed(): the start of the option's help
_SPECULATIVE_NOTES: Mapping[str, str] = {
    **dict.fromkeys(
        (
            "cpu-mask-draft",
            "cpu-range-draft",
            "cpu-strict-draft",
            "prio-draft",
            "poll-draft",
            "cpu-mask-batch-draft",
            "cpu-strict-batch-draft",
            "prio-batch-draft",
            "poll-batch-draft",
            "override-tensor-draft",
            "cpu-moe-draft",
            "n-cpu-moe-draft",
        ),
        _DRAFT_AS_TARGET,
    ),
    "spec-draft-backend-sampling": _SAMPLING,
    "draft-p-split": "llama-server reads it nowhere either (only arg.cpp sets it)",
}
_MODEL_IGNORED = "the inference worker (llama-cpp-python) does not take it"
_SERVER_IGNORED = "a llama-server feature the inference worker does not have"

# llama.cpp built-in template names -> llama-cpp-python chat formats of the same template.
CHAT_FORMATS: Mapping[str, str] = {
    "chatml": "chatml",
    "llama2": "llama-2",
    "llama3": "llama-3",
    "gemma": "gemma",
    "vicuna": "vicuna",
    "zephyr": "zephyr",
    "openchat": "openchat",
    "chatglm3": "chatglm3",
}


def handling(arg: LlamaArg) -> Handling:
    """The decision for ``arg`` (every option has one: unknown ones default to ignored)."""
    key = arg.key
    if arg.help.startswith(REMOVED):
        hint = arg.help.removeprefix(REMOVED + ". ")
        return Handling(
            "model", False, f"removed from llama.cpp ({hint}): refused at start, as by llama-server", refused=True
        )
    if key in _ROUTER:
        return Handling("router", True, _ROUTER[key])
    if key in _ROUTER_IGNORED:
        return Handling("router", False, _ROUTER_IGNORED[key])
    if key in _SOURCE:
        honoured, note = _SOURCE[key]
        return Handling("source", honoured, note)
    if key in _PRESET:
        honoured, note = _PRESET[key]
        return Handling("preset", honoured, note)
    if key in _MODEL:
        param, note = _MODEL[key]
        return Handling("model", True, note, param or None)
    if key in BY_KEY:  # the launch's table: an option the worker takes as it is
        name = BY_KEY[key]
        return Handling("model", True, ROWS[name].help, name)
    if field_of(key) is not None:
        return Handling("model", True, _SAMPLING_DEFAULT, f"sampling.{field_of(key)}")
    if arg.sampling:
        return Handling("model", False, _SAMPLING)
    if arg.speculative or key.endswith("-draft") or key.startswith("spec-"):
        return Handling("model", False, _SPECULATIVE_NOTES.get(key, _MODEL_IGNORED))
    return Handling("model", False, _SERVER_IGNORED if arg.server_specific else _MODEL_IGNORED)


def _spellings(arg: LlamaArg) -> dict[str, bool]:
    """Every preset key that names ``arg``: spellings without dashes, and env names
    (``LLAMA_ARG_NO_X`` for a bool's negation); value: whether it negates."""
    keys = {name.lstrip("-"): False for name in arg.names}
    keys.update({name.lstrip("-"): True for name in arg.negations})
    if arg.env:
        keys[arg.env] = False
        if arg.negations and arg.env.startswith("LLAMA_ARG_"):
            keys[arg.env.replace("LLAMA_ARG_", "LLAMA_ARG_NO_", 1)] = True
    return keys


def _index() -> dict[str, tuple[LlamaArg, bool]]:
    index: dict[str, tuple[LlamaArg, bool]] = {}
    for arg in ARGS:
        for key, negated in _spellings(arg).items():
            index.setdefault(key, (arg, negated))
    return index


_BY_KEY = _index()
BY_NAME: Mapping[str, LlamaArg] = {arg.key: arg for arg in ARGS}
"""Canonical key (``ctx-size``) -> option."""


def lookup(key: str) -> tuple[LlamaArg, bool] | None:
    """The option a preset key names (long or short name without dashes, or env
    name) and whether the key is its negation (``no-jinja``); None if unknown."""
    return _BY_KEY.get(key)


TRUTHY = frozenset({"on", "enabled", "true", "1"})
FALSEY = frozenset({"off", "disabled", "false", "0"})


def is_falsey(value: str) -> bool:
    """llama.cpp's ``is_falsey``: what turns a flag off in a preset or an env variable."""
    return value.strip().lower() in FALSEY
