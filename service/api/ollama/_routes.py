"""The ``/api`` router: every Ollama route, with Ollama's error bodies and the inference body limit."""

from __future__ import annotations

from litestar import Router

from service.api.ollama._catalogue import copy, create, delete_model, ps, push, show, tags, version, version_head
from service.api.ollama._chat import chat, embed, embeddings, generate
from service.api.ollama._errors import OLLAMA_EXCEPTION_HANDLERS
from service.api.ollama._pull import pull

OLLAMA_HANDLERS = (
    version, version_head, tags, ps, show, delete_model, copy, create, push, pull, chat, generate, embed, embeddings,
)  # fmt: skip


def ollama_router() -> Router:
    """Ollama's API under ``/api`` (the app's ``max_body_bytes`` applies: chats carry prompts)."""
    return Router(path="/api", route_handlers=list(OLLAMA_HANDLERS), exception_handlers=OLLAMA_EXCEPTION_HANDLERS)
