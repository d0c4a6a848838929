"""The HTTP/1.1 server: routes, jobs, streams, the request front.

* ``_handler``: the stdlib handler (:func:`~._handler.bind_server`): routes, streaming, hang-up detection;
  ``_listener``: the socket, and its lock (401 to any request without the service's secret, issue 34).
* ``_app``: :class:`~._app.InferenceApp`, what the handlers share; ``_front``: the batch engine's
  request front (loaded with the model); ``_multi``: ``n_cmpl`` completions of one request.
* ``_jobs``: a request body -> the engine job; ``_streams``: resumable streams; ``_wire``: bytes on
  the wire; ``_admin_routes``: slot files and LoRA scales; ``_prompt_log``: ``--log-prompts-dir``.

This room may know the chat and dialect rooms. It exports what the worker needs; the request front
(``_front``) is not among it, as it loads with the model (:meth:`~._app.InferenceApp.make_front`).
"""

from __future__ import annotations

from workers.inference.http.server._app import InferenceApp
from workers.inference.http.server._handler import bind_server

__all__ = [
    "InferenceApp",
    "bind_server",
]
