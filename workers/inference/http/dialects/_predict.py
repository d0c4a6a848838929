"""Vertex AI's prediction route (llama-server's ``register_gcp_compat``, with ``AIP_MODE=PREDICTION``).

``POST /predict`` (or ``AIP_PREDICT_ROUTE``) takes ``{"instances": [...]}`` (at
most 128), each an ordinary request body plus ``"@requestFormat"``: a route's
camelCase alias (``chatCompletions``, ``completion``, ``embeddings``,
``applyTemplate``...) or its path. Each instance runs as that route would,
never streamed, side by side; the answer is ``{"predictions": [...]}`` in
instance order, a failed instance's entry being ``{"error": {...}}``.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from typing import Any

from workers.inference.engine import EngineError
from workers.inference.http._errors import ApiError, answer_for
from workers.inference.http._json import JsonObject

MAX_INSTANCES = 128
# The worker's POST routes; an alias both forms share goes to the OpenAI one (/v1), listed first
# (llama-server's alias table is an unordered map, so which one it picks is unspecified).
PATHS = (
    "/v1/chat/completions",
    "/v1/completions",
    "/v1/embeddings",
    "/v1/rerank",
    "/v1/reranking",
    "/chat/completions",
    "/completions",
    "/completion",
    "/infill",
    "/embeddings",
    "/embedding",
    "/rerank",
    "/reranking",
    "/tokenize",
    "/detokenize",
    "/apply-template",
)


def gcp_format(path: str) -> str:
    """llama-server's ``path_to_gcp_format``: ``/v1/chat/completions`` → ``chatCompletions``."""
    words = re.split(r"[/_-]+", path.removeprefix("/v1").strip("/"))
    return words[0] + "".join(w[:1].upper() + w[1:] for w in words[1:])


_ALIASES: dict[str, str] = {}
for _path in PATHS:
    _ALIASES.setdefault(gcp_format(_path), _path)


def _path_of(fmt: str) -> str:
    path = _ALIASES.get(fmt) or (fmt if fmt in PATHS else None)
    if path is None:
        raise ApiError(400, f"no handler registered for @requestFormat: {fmt}")
    return path


def predict(body: JsonObject, answer: Callable[[str, JsonObject], Any]) -> JsonObject:
    """Every instance through ``answer(path, body)``, concurrently; llama-server's ``predictions``."""
    instances = body.get("instances")
    if not isinstance(instances, list):
        raise ApiError(400, "request body must include an array field named instances")
    if len(instances) > MAX_INSTANCES:
        raise ApiError(400, f"instances array exceeds maximum size of {MAX_INSTANCES}")
    predictions: list[Any] = [None] * len(instances)

    def run(i: int, instance: Any) -> None:
        try:
            if not isinstance(instance, dict):
                raise ApiError(400, "each instance must be a JSON object")
            fmt = instance.get("@requestFormat")
            if not isinstance(fmt, str):
                raise ApiError(400, "each instance must include a string @requestFormat")
            payload = {k: v for k, v in instance.items() if k != "@requestFormat"}
            predictions[i] = answer(_path_of(fmt), {**payload, "stream": False})
        except (ApiError, EngineError) as err:
            predictions[i] = answer_for(err).body()
        except Exception as exc:  # llama-server answers the instance with a server error
            predictions[i] = ApiError(500, f"inference failed: {exc}", "server_error").body()

    threads = [threading.Thread(target=run, args=(i, x), daemon=True) for i, x in enumerate(instances)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {"predictions": predictions}
