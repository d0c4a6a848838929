"""A completion request's prompts, in the forms llama-server's ``tokenize_input_prompts`` reads.

Kept apart from :mod:`._requests` (which maps the rest of the body): the question of how many
prompts a body holds, and what each is, is llama-server's own grammar of ``prompt``.
"""

from __future__ import annotations

from typing import cast

from workers.inference.http._errors import ApiError
from workers.inference.http._json import Json, JsonObject, is_strings, is_token
from workers.inference.http.chat import Media, lenient_b64decode


def split_prompts(prompt: Json) -> list[Json]:
    """The prompts of a completion request, as llama-server's ``tokenize_input_prompts`` reads them:
    a list without an integer is several prompts, anything else one."""
    if isinstance(prompt, list) and not any(is_token(p) for p in prompt):
        if not prompt:
            raise ApiError(400, '"prompt" must not be empty')
        return list(prompt)
    return [prompt]


def _prompt(prompt: Json, media: Media | None = None) -> str | list[int | str]:
    """One completion prompt in llama-server's forms: a string, token ids, strings mixed with
    ids, or ``{"prompt_string": ..., "multimodal_data": [base64, ...]}`` (the files go to ``media``
    for a model with a projector; the string holds one ``/props`` ``media_marker`` per file)."""
    if isinstance(prompt, dict):
        files = prompt.get("multimodal_data")
        if files and media is None:
            raise ApiError(400, "Multimodal data provided, but model does not support multimodal requests.")
        if files and media is not None:
            if not is_strings(files):
                raise ApiError(400, "'multimodal_data' must be a list of base64 strings")
            media.extend(("media", lenient_b64decode(f)) for f in files)
        prompt = prompt.get("prompt_string")
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list) and any(is_token(t) for t in prompt):
        parts = [t for t in prompt if isinstance(t, str) or is_token(t)]
        if len(parts) == len(prompt):  # every one a string or a token id
            return parts
    raise ApiError(400, "'prompt' is required: a string, token ids, strings mixed with token ids, or an object")


def prompt_args(prompt: Json, media: bool) -> JsonObject:
    """One prompt's ``prompt`` (and ``media_files``, with a projector) for ``create_completion``."""
    files: Media | None = [] if media else None
    text = _prompt(prompt, files)
    if not files:
        return {"prompt": cast("Json", text)}
    if not isinstance(text, str):
        raise ApiError(400, "'multimodal_data' needs a 'prompt_string'")
    return {"prompt": text, "media_files": cast("Json", files)}  # (kind, bytes) pairs, for the front only
