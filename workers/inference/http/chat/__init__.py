"""Chats as llama-server renders and reads them: templates, families, markup, parsing, grammars, media.

* ``_template``: the chat template, rendered as llama-server renders it; ``_template_caps``: what it can do.
* ``_session``: a chat request's prompt, grammar and run (:class:`~._session.ChatRun`).
* ``_tool_prompt``: the tools and ``tool_choice`` checked, the calls' grammar, the tools' system prompts.
* ``_parse``: output -> content, reasoning, tool calls (pure), over ``_formats`` (the template
  families and their readers; pure) and ``_markup`` (JSON, XML, Python-call and harmony pieces; pure).
* ``_grammar``: each family's tool-call grammar; ``_media``: a chat's images, sounds and videos.

This room knows neither the API dialects nor the server; they import what it exports here, its own
modules import each other directly.
"""

from __future__ import annotations

from workers.inference.http.chat._formats import FAMILIES
from workers.inference.http.chat._media import (
    MEDIA_PARTS,
    Media,
    MediaInput,
    lenient_b64decode,
    load_media,
    media_prompt,
    part_url,
)
from workers.inference.http.chat._parse import ChatMessage, Delta, ToolCallJson, tool_call_json
from workers.inference.http.chat._session import CHAT_DEFAULTS, ChatPlan, ChatRun, plan_chat
from workers.inference.http.chat._template import TemplateOptions, build_renderer
from workers.inference.http.chat._template_caps import template_caps

__all__ = [
    "CHAT_DEFAULTS",
    "FAMILIES",
    "MEDIA_PARTS",
    "ChatMessage",
    "ChatPlan",
    "ChatRun",
    "Delta",
    "Media",
    "MediaInput",
    "TemplateOptions",
    "ToolCallJson",
    "build_renderer",
    "lenient_b64decode",
    "load_media",
    "media_prompt",
    "part_url",
    "plan_chat",
    "template_caps",
    "tool_call_json",
]
