"""The ``/api`` router: every Ollama route, with Ollama's error bodies and the inference body limit."""

from __future__ import annotations

from litestar import Router

import service.api.ollama._catalogue as c
from service.api.controllers import options_handlers
from service.api.ollama._chat import chat, embed, embeddings, generate
from service.api.ollama._errors import OLLAMA_EXCEPTION_HANDLERS
from service.api.ollama._pull import pull

OLLAMA_HANDLERS = (
    c.version,
    c.version_head,
    c.tags,
    c.tags_head,
    c.ps,
    c.show,
    c.delete_model,
    c.copy,
    c.create,
    c.push,
    pull,
    chat,
    generate,
    embed,
    embeddings,
)


def ollama_router() -> Router:
    """Ollama's API under ``/api`` (the app's ``max_body_bytes`` applies: chats carry prompts)."""
    handlers = [*options_handlers(OLLAMA_HANDLERS), *OLLAMA_HANDLERS]  # OPTIONS first: see controllers._options
    return Router(path="/api", route_handlers=handlers, exception_handlers=OLLAMA_EXCEPTION_HANDLERS)
