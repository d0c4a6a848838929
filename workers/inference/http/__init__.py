"""The inference worker's HTTP side, in three rooms and a floor:

* :mod:`.chat`: chat templates, families, markup, parsing, grammars, media;
* :mod:`.dialects`: the APIs spoken (OpenAI, Anthropic, Responses, llama-server's own, Vertex AI);
* :mod:`.server`: the HTTP/1.1 server, routes, jobs, streams, the request front;
* the floor, which every room may import and which imports no room: ``_errors``
  (:class:`ApiError`, :func:`answer_for`), ``_options`` (:class:`FrontOptions`), ``_json``
  (a request body's JSON values and their checks) and ``_record`` (what a request leaves on
  record, and the completion objects its answers are shaped from).

Chat knows neither dialects nor server; dialects may know chat; server may know both
(``tests/test_architecture.py`` ``HTTP_ROOMS_MAY_IMPORT``). The request front and the chat
modules load with the model, on the engine thread (:meth:`InferenceApp.make_front`), so
this package does not export them.
"""

from __future__ import annotations

from workers.inference.http._errors import ApiError, answer_for
from workers.inference.http._json import json_object
from workers.inference.http._options import FrontOptions
from workers.inference.http.dialects import load_sampling_defaults, model_info
from workers.inference.http.server import InferenceApp, bind_server

__all__ = [
    "ApiError",
    "FrontOptions",
    "InferenceApp",
    "answer_for",
    "bind_server",
    "json_object",
    "load_sampling_defaults",
    "model_info",
]
