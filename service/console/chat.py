"""``modelrouter load`` and ``run``: load with a progress bar, then chat with
tokens printed as they stream in (``/v1/chat/completions``, ``stream: true``)."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from service.console.client import Body, Client, CliError, without_hint
from service.console.format import duration

_LOAD_TYPES = ("instance_*", "loading_progress")
_QUIT = {"/bye", "/exit", "/quit"}
_SAMPLING = ("max_tokens", "temperature", "seed", "stop")


def load(client: Client, console: Console, name: str, *, wait: bool = True) -> str:
    """Load ``name`` (a no-op when loaded) and, with ``wait``, follow it to ready.
    Returns the canonical model name."""
    head = client.head()
    answer = client.post("/models/load", {"model": name})
    model = str(answer["model"])
    if answer.get("status") == "loaded" or not wait:
        return model
    progress = Progress(TextColumn("loading {task.description}"), BarColumn(), TimeElapsedColumn(), console=console)
    with progress, client.events({"model": model, "type": list(_LOAD_TYPES), "after": head}) as stream:
        task = progress.add_task(model, total=1.0)
        for event in stream:
            data, kind = event["data"], event["type"]
            if kind == "loading_progress":
                progress.update(task, completed=float(data.get("progress") or 0))
            elif kind == "instance_ready":
                progress.update(task, completed=1.0)
                progress.stop()
                console.print(f"{model} loaded in {duration(float(data.get('load_ms') or 0) / 1000)}")
                return model
            elif kind == "instance_load_failed":
                raise CliError(f"load failed: {data.get('reason')}: {data.get('message')}")
            elif kind == "instance_crashed":
                raise _crashed(client, model)
            elif kind in ("instance_stopped", "instance_lost"):
                raise CliError(f"the model's worker ended while loading ({kind}); see `modelrouter history {model}`")
    raise CliError("the event stream ended before the model was ready")


def _crashed(client: Client, model: str) -> CliError:
    """The crash in words (GET /models has the reason the fold derived), with its hint."""
    entry = next((m for m in client.get("/models")["data"] if m["id"] == model), None)
    error = (entry or {}).get("status", {}).get("error") or {}
    message = error.get("message") or "its worker crashed"
    return CliError(f"{model}: {message}; see `modelrouter history {model}`", hint=error.get("hint"))


def _reply(client: Client, body: Body) -> str:
    """Stream one answer to stdout; return its text."""
    parts: list[str] = []
    with client.stream("POST", "/v1/chat/completions", json=body) as events:
        for _event, _id, data in events:
            if data.strip() == "[DONE]":
                break
            chunk = json.loads(data)
            if "error" in chunk:
                hint = chunk.get("hint")
                message = str(chunk["error"].get("message", chunk["error"]))
                raise CliError(without_hint(message, hint), hint=hint if isinstance(hint, str) else None)
            for choice in chunk.get("choices") or []:
                text = (choice.get("delta") or {}).get("content") or ""
                parts.append(text)
                sys.stdout.write(text)
                sys.stdout.flush()
    sys.stdout.write("\n")
    sys.stdout.flush()
    return "".join(parts)


def run(client: Client, console: Console, name: str, prompt: str | None, options: Mapping[str, object]) -> int:
    """Chat with ``name``: one answer for ``prompt``, else an interactive session."""
    model = load(client, console, name)
    messages: list[dict[str, str]] = []
    if options.get("system"):
        messages.append({"role": "system", "content": str(options["system"])})
    sampling = {k: v for k, v in options.items() if k in _SAMPLING and v is not None}

    def ask(text: str) -> str:
        body = {"model": model, "messages": [*messages, {"role": "user", "content": text}], "stream": True}
        return _reply(client, {**body, **sampling})

    if prompt is not None:
        ask(sys.stdin.read() if prompt == "-" else prompt)
        return 0
    console.print(f"[dim]chatting with {model}: /bye or Ctrl-D to leave, Ctrl-C stops an answer[/]")
    while True:
        try:
            text = input(">>> ")
        except (EOFError, KeyboardInterrupt):
            sys.stdout.write("\n")
            return 0
        if text.strip() in _QUIT:
            return 0
        if not text.strip():
            continue
        try:
            answer = ask(text)
        except KeyboardInterrupt:
            sys.stdout.write("\n")
            continue  # the answer is dropped; the conversation goes on without it
        messages += [{"role": "user", "content": text}, {"role": "assistant", "content": answer}]
