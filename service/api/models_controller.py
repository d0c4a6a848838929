"""Model catalogue endpoints in llama.cpp router shape."""

from __future__ import annotations

from typing import Any

from litestar import get

from service.api.runtime import Runtime
from service.api.views import models_view


@get("/models", operation_id="listModels", tags=["models"])
async def list_models(runtime: Runtime) -> dict[str, Any]:
    """Every model the log knows of, with status, progress and last error."""
    return models_view(runtime.live.state)


@get("/v1/models", operation_id="listModelsOpenAI", tags=["models"])
async def list_models_openai(runtime: Runtime) -> dict[str, Any]:
    """The same list under the OpenAI path, for OpenAI clients."""
    return models_view(runtime.live.state)
