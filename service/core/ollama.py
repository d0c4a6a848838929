"""Ollama's API in our terms: pure translations the Ollama routes (``service/api/ollama``) apply.

* :func:`model_name`: ``hf.co/user/repo:QUANT``, ``huggingface.co/user/repo:QUANT`` and our own
  ``user/repo:TAG`` all name the same model; Ollama's default tag ``latest`` means "no tag".
* :func:`keep_alive_seconds`: Ollama's ``keep_alive`` (a number of seconds or a Go duration) as
  the idle limit the instance keeps (``service.core.scheduling.idle_limit``).
* :func:`sampling`: Ollama's ``options`` onto the worker's OpenAI-style sampling members.
* :func:`pull_status`: a download job as the lines of Ollama's pull progress.

Every refusal is an :class:`InvalidRequest` naming the field (the routes answer 400).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

from service.core.state import DownloadJob, JobStatus

__all__ = [
    "FOREVER",
    "InvalidRequest",
    "keep_alive_seconds",
    "model_name",
    "pull_status",
    "response_format",
    "sampling",
]

FOREVER = -1.0
"""``keep_alive`` for "never unload" (Ollama: any negative duration)."""

_HUB_PREFIXES = ("hf.co/", "huggingface.co/", "https://hf.co/", "https://huggingface.co/")
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


class InvalidRequest(ValueError):
    """An Ollama request member we cannot honour; the message names it."""


def _invalid(message: str) -> InvalidRequest:
    return InvalidRequest(message)


def model_name(name: str) -> str:
    """Our model name for an Ollama one: the Hub host prefix and a ``:latest`` tag dropped
    (``hf.co/user/repo:Q4_K_M`` -> ``user/repo:Q4_K_M``; ``user/repo:latest`` -> ``user/repo``)."""
    out = name.strip()
    lowered = out.lower()
    for prefix in _HUB_PREFIXES:
        if lowered.startswith(prefix):
            out = out[len(prefix) :]
            break
    if out.lower().endswith(":latest"):
        out = out[: -len(":latest")]
    if not out:
        raise _invalid("model is required")
    return out


def _go_duration(text: str) -> float:
    """Go's ``time.ParseDuration`` (``1h30m``, ``300ms``, ``-1m``) in seconds; a bare number is seconds."""
    body = text.strip()
    sign = -1.0 if body.startswith("-") else 1.0
    body = body.lstrip("+-")
    try:
        return sign * float(body)  # Ollama's clients send "300" too; Go would refuse it
    except ValueError:
        pass
    if body == "" or _DURATION_PART.sub("", body) != "":
        raise _invalid(f"keep_alive: invalid duration {text!r} (a number of seconds, or e.g. '5m', '1h30m', '-1')")
    return sign * sum(float(n) * _UNIT_SECONDS[u] for n, u in _DURATION_PART.findall(body))


def keep_alive_seconds(value: float | str | None) -> float | None:
    """Ollama's ``keep_alive``: None when not given (the model's own TTL applies), else the
    seconds a model may stay idle after this request; ``0`` unloads it once idle, and any
    negative value is :data:`FOREVER` (never unload)."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise _invalid("keep_alive must be a number of seconds or a duration string")
    seconds = _go_duration(value) if isinstance(value, str) else float(value)
    if math.isnan(seconds):
        raise _invalid("keep_alive must be a number of seconds or a duration string")
    return FOREVER if seconds < 0 or math.isinf(seconds) else seconds


# Ollama option -> the worker's member (llama-server's and OpenAI's names), and the type it takes.
_FLOAT_OPTIONS = {
    "temperature": "temperature",
    "top_p": "top_p",
    "min_p": "min_p",
    "typical_p": "typical_p",
    "repeat_penalty": "repeat_penalty",
    "presence_penalty": "presence_penalty",
    "frequency_penalty": "frequency_penalty",
    "mirostat_tau": "mirostat_tau",
    "mirostat_eta": "mirostat_eta",
}
_INT_OPTIONS = {"top_k": "top_k", "seed": "seed", "mirostat": "mirostat_mode"}
# Accepted and ignored: they configure a load (context, GPU layers, threads...), which a model's
# preset or command line sets here, or sampling this engine does not offer.
_LOAD_OPTIONS = frozenset(
    {
        "num_keep",
        "num_batch",
        "num_gpu",
        "main_gpu",
        "use_mmap",
        "use_mlock",
        "num_thread",
        "numa",
        "low_vram",
        "vocab_only",
        "f16_kv",
        "logits_all",
        "embedding_only",
        "repeat_last_n",
        "penalize_newline",
        "tfs_z",
    }
)


def _number(key: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise _invalid(f"options.{key} must be a number")
    return float(value)


def _integer(key: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value):
        raise _invalid(f"options.{key} must be an integer")
    return int(value)


def _stop(value: object) -> list[str]:
    stops = [value] if isinstance(value, str) else value
    if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
        raise _invalid("options.stop must be a string or a list of strings")
    return list(stops)


def sampling(options: Mapping[str, object], n_ctx: int | None) -> dict[str, object]:
    """The worker's sampling members for Ollama's ``options``. ``num_predict`` is ``max_tokens``
    (negative: until the model stops). ``num_ctx`` is a per-request bound, not a reload: the
    answer stays within ``min(num_ctx, n_ctx)`` tokens (``max_tokens`` capped there), and a prompt
    that does not fit the loaded context ``n_ctx`` is the worker's 400. Refusing a ``num_ctx``
    above ``n_ctx`` instead would break clients that always send one (Continue sends its
    context length), where Ollama would have reloaded the model with a bigger context."""
    out: dict[str, object] = {}
    window: int | None = None
    for key, value in options.items():
        if value is None:
            continue
        if key in _FLOAT_OPTIONS:
            out[_FLOAT_OPTIONS[key]] = _number(key, value)
        elif key in _INT_OPTIONS:
            out[_INT_OPTIONS[key]] = _integer(key, value)
        elif key == "num_predict":
            limit = _integer(key, value)
            if limit >= 0:
                out["max_tokens"] = limit
        elif key == "stop":
            out["stop"] = _stop(value)
        elif key == "num_ctx":
            asked = _integer(key, value)
            if asked <= 0:
                raise _invalid("options.num_ctx must be a positive integer")
            window = asked if n_ctx is None else min(asked, n_ctx)
        elif key not in _LOAD_OPTIONS:
            raise _invalid(f"options.{key} is not an option Ollama knows")
    if window is not None:
        asked_tokens = out.get("max_tokens")
        out["max_tokens"] = min(asked_tokens, window) if isinstance(asked_tokens, int) else window
    return out


def response_format(fmt: object) -> dict[str, object] | None:
    """Ollama's ``format`` (``"json"`` or a JSON schema) as OpenAI's ``response_format``, which the
    worker turns into a grammar; ``""`` or None: free text."""
    if fmt is None or fmt == "":
        return None
    if fmt == "json":
        return {"type": "json_object"}
    if isinstance(fmt, dict):
        return {"type": "json_schema", "json_schema": {"name": "format", "schema": fmt}}
    raise _invalid('format must be "json" or a JSON schema object')


def pull_status(job: DownloadJob, digest: str) -> dict[str, object]:
    """One progress line of Ollama's pull for ``job`` (``digest``: the file's ``sha256:...``).
    Ollama omits ``completed`` until bytes arrived and ``total`` until it is known."""
    if job.status is JobStatus.FINISHED:
        return {"status": "success"}
    line: dict[str, object] = {"status": f"pulling {digest.removeprefix('sha256:')[:12]}", "digest": digest}
    if job.bytes_total:
        line["total"] = job.bytes_total
    if job.bytes_done:
        line["completed"] = job.bytes_done
    return line
