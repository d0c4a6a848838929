"""How the request front serves this model: the worker's command line, as the handlers read it.

On the floor of the HTTP package (beside ``_errors``): the server builds the front from it and
llama-server's ``/props`` (a dialect) reports it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from workers.inference.http._json import Json


@dataclass(frozen=True)
class FrontOptions:
    """How the request front serves this model: ``--chat-format``, ``--seed``, ``--max-prompt-tokens``,
    ``--spm-infill``, ``--slot-save-path``, ``--props``, which of llama-server's monitoring endpoints
    answer (``--no-metrics``, ``--no-slots``), and the chat template's options (``--chat-template-file``,
    ``--no-jinja``, ``--chat-template-kwargs``, ``--no-prefill-assistant``, ``--reasoning-format``, ``--reasoning``)."""

    chat_format: str | None = None
    default_seed: int | None = None
    max_prompt_tokens: int = 0
    spm_infill: bool = False
    slot_save_path: str | None = None
    log_prompts_dir: str | None = None  # llama-server's --log-prompts-dir (_prompt_log)
    endpoint_props: bool = False
    predict_route: str | None = None  # Vertex AI's POST route (AIP_MODE=PREDICTION), else none
    endpoint_metrics: bool = True  # llama-server's --metrics (the service passes --no-metrics without it)
    endpoint_slots: bool = True  # llama-server's --slots / --no-slots
    chat_template: str | None = None  # --chat-template's text (a built-in name arrives as chat_format)
    chat_template_file: str | None = None
    jinja: bool = True
    chat_template_kwargs: str | None = None  # a JSON object's text
    prefill_assistant: bool = True  # --no-prefill-assistant: a last assistant message is a whole turn
    reasoning_format: str = "auto"
    reasoning: str = "auto"  # --reasoning: on, off or auto (the templates' enable_thinking)
    spec_type: str = "none"  # --spec-type (speculative.types in /props and generation_settings)
    verbose: bool = False  # llama-server's -v: OpenAI answers carry __verbose (dialects._verbose)
    mmproj: str | None = None  # --mmproj: the model's projector (chats may carry images, see _jobs)
    # llama-server's sampling options (--temp, -n, --grammar-file...): every request's defaults (_server_defaults)
    sampling_defaults: Mapping[str, Json] = field(default_factory=dict)
