"""The inference worker's HTTP side: the server, the OpenAI and llama-server routes, the request front.

* ``_server``: the HTTP/1.1 handler over the stdlib (:func:`bind_server`): routes,
  streaming, hang-up detection; ``_app``: :class:`InferenceApp`, what the handlers share.
* ``_requests``: OpenAI request validation, mapped onto ``llama_cpp.Llama``'s calls.
* ``_llama_server``: llama-server's own endpoints (``/tokenize``, ``/props``, native ``/completion``...).
* ``_errors``: :class:`ApiError` and :func:`answer_for`, the one table from engine errors to answers.
* ``_front``: the batch engine's request front (``Llama``'s completion surface),
  ``_shapes``: its completion objects. Chats: ``_chat_template`` (the template, rendered
  as llama-server renders it), ``_chat_session`` (a request's prompt, grammar and run),
  ``_chat_parse`` (output -> content, reasoning, tool calls; pure), ``_chat_formats`` (the
  template families and their readers; pure) over ``_chat_markup`` (JSON, XML, Python-call
  and harmony pieces; pure), ``_chat_grammar`` (each family's tool-call
  grammar), ``_chat_openai``,
  ``_anthropic``, ``_responses`` (each API's shapes), ``_compat`` and ``_sse``. These load
  with the model, on the engine thread (:meth:`InferenceApp.make_front`), so this package
  does not export them.
"""

from __future__ import annotations

from workers.inference.http._app import FrontOptions, InferenceApp
from workers.inference.http._errors import ApiError, answer_for
from workers.inference.http._llama_server import model_info
from workers.inference.http._server import bind_server
from workers.inference.http._server_defaults import load as load_sampling_defaults

__all__ = [
    "ApiError",
    "FrontOptions",
    "InferenceApp",
    "answer_for",
    "bind_server",
    "load_sampling_defaults",
    "model_info",
]
