"""``modelrouter ls``, ``ps``, ``history`` and ``events``: the API's answers as tables."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import psutil
from rich.console import Console
from rich.table import Table

from service.console.client import Client, Query
from service.console.format import ago, duration, size, when
from service.console.where import devices, gpu_layers
from service.core.devices import MIB, shown_node

if TYPE_CHECKING:
    from service.core.events import EventPayload
    from service.event_store.codec import WireEvent

_RUNNING = ("loading", "loaded", "unloading", "unresponsive")
_SUMMARY = 200  # characters of an event's data on one line; --json has all of it


def _table(*headers: str, title: str | None = None) -> Table:
    """Columns only, no box: reads like ``ollama ls`` and greps well."""
    table = Table(*headers, title=title, box=None, pad_edge=False)
    table.columns[0].overflow = "fold"  # a model name is wrapped, never cut
    return table


def _quant(model: Mapping[str, object]) -> str:  # a GET /models entry
    name = str(model["id"])
    if ":" in name:
        return name.rsplit(":", 1)[1]
    stem = Path(str(model.get("path") or name)).stem  # models dir: tiny-Q4_K_M.gguf
    return stem.rsplit("-", 1)[1] if "-" in stem else "-"


def _architectures(client: Client) -> dict[str, str]:
    """model -> architecture, as its last ``instance_ready`` said (never loaded: unknown)."""
    found: dict[str, str] = {}
    after = 0
    while True:
        page = client.get("/events", type="instance_ready", after=after, limit=1000)
        for event in page["events"]:
            found[event["model"]] = event["data"].get("architecture") or "-"
        if page["next_after"] is None:
            return found
        after = page["next_after"]


def ls(client: Client, console: Console) -> int:
    """Downloaded and discovered models."""
    models = client.get("/models")["data"]
    arch = _architectures(client)
    table = _table("NAME", "STATUS", "QUANT", "SIZE", "ARCH", "SOURCE", "LAST USED")
    for m in models:
        status = m["status"]["value"]
        progress = m["status"].get("progress")
        if progress:
            status = f"{status} {progress['fraction'] * 100:.0f}%"
        table.add_row(
            m["id"],
            status,
            _quant(m),
            size(m.get("size")),
            arch.get(m["id"], "-"),
            m.get("source") or "-",
            ago(m.get("last_used")),
        )
    console.print(table if models else "no models yet: try `modelrouter pull user/repo:QUANT`")
    return 0


def _memory(pid: int | None) -> str:
    """Resident memory when the worker runs on this machine; ``-`` otherwise."""
    if pid is None:
        return "-"
    try:
        proc = psutil.Process(pid)
        if "workers.inference" not in " ".join(proc.cmdline()):
            return "-"  # the service is elsewhere and this pid is someone else's
        return size(proc.memory_info().rss)
    except (psutil.Error, OSError):
        return "-"


def history_path(model: str) -> str:
    return f"/models/{quote(model, safe='/:@')}/history"


def ps(client: Client, console: Console) -> int:
    """Running instances: pid, uptime, memory, where it runs (GPU layers, the devices and the memory
    on each), requests in flight, last used; then each failed model's reason in one line, and a hint."""
    listed = client.get("/models")["data"]
    models = [m for m in listed if m["status"]["value"] in _RUNNING]
    in_flight = client.get("/health").get("in_flight_by_model") or {}
    table = _table(
        "NAME", "STATUS", "PID", "UPTIME", "MEMORY", "GPU LAYERS", "DEVICES", "IN FLIGHT", "SERVED", "LAST USED"
    )
    for m in models:
        inst = m["status"].get("instance") or {}
        loads = client.get(history_path(m["id"]))["loads"]
        last = loads[-1] if loads else {}
        table.add_row(
            m["id"],
            m["status"]["value"],
            str(inst.get("pid") or "-"),
            duration(last.get("uptime_seconds")),
            _memory(inst.get("pid")),
            gpu_layers(m),
            devices(m),
            str(in_flight.get(m["id"], 0)),
            str(last.get("requests_served", 0)),
            ago(m.get("last_used")),
        )
    console.print(table if models else "no model is loaded: try `modelrouter load MODEL` or `modelrouter run MODEL`")
    for m in listed:
        value = m["status"]["value"]
        error = m["status"].get("error") if value in ("failed", "unresponsive") else None
        if error:
            console.print(f"{m['id']} {value}: {error.get('message')}", highlight=False, soft_wrap=True)
            if error.get("hint"):
                console.print(f"  hint: {error['hint']}", highlight=False, soft_wrap=True)
    return 0


def _ending(load: Mapping[str, object]) -> str:  # one of GET /models/{model}/history's loads
    ended = str(load["ended"])
    if ended == "crashed":
        how = f"signal {load['signal']}" if load.get("signal") else f"exit {load.get('exit_code')}"
        return f"crashed ({how})"
    labels = {"evicted": "evicted", "idle": "idle TTL", "unload": "unloaded", "load_failed": "load failed"}
    text = labels.get(ended, ended)
    return f"{text}: {load['message']}" if load.get("message") else text


def history(client: Client, console: Console, name: str, *, as_json: bool = False) -> int:
    """The timeline: each download, each load, then each save, restore and discard of its prompt cache."""
    body = client.get(history_path(name))
    if as_json:
        console.print_json(json.dumps(body))
        return 0
    downloads = _table("WHEN", "DURATION", "BYTES", "RESUMED", "OUTCOME", "REASON", title="downloads")
    for d in body["downloads"]:
        reason = ": ".join(x for x in (d.get("reason"), d.get("message")) if x) or "-"
        downloads.add_row(
            when(d["requested_at"]),
            duration(d["duration_seconds"]),
            f"{size(d['bytes_done'])} / {size(d['bytes_total'])}",
            size(d["resumed_bytes"]) if d["resumed_bytes"] else "-",
            d["outcome"],
            reason,
        )
    loads = _table("WHEN", "WHY", "PID", "LOAD TIME", "UPTIME", "REQUESTS", "ENDED", title="loads")
    for x in body["loads"]:
        load_time = duration(x["load_ms"] / 1000) if x.get("load_ms") is not None else "-"
        loads.add_row(
            when(x["requested_at"]),
            x["reason"],
            str(x.get("pid") or "-"),
            load_time,
            duration(x.get("uptime_seconds")),
            str(x["requests_served"]),
            _ending(x),
        )
    console.print(f"[bold]{body['model']}[/]")
    console.print(downloads if body["downloads"] else "no downloads")
    console.print(loads if body["loads"] else "never loaded")
    cache = _table("WHEN", "ACTION", "FILE", "TOKENS", "BYTES", "WHY", title="prompt cache on disk")
    for c in body.get("prompt_cache", []):  # issue 35: saves at planned unloads, restores at loads
        tokens = "-" if c["tokens"] is None else str(c["tokens"])
        cache.add_row(when(c["at"]), c["action"], c["file"], tokens, size(c["bytes"]), c.get("reason") or "-")
    if body.get("prompt_cache"):
        console.print(cache)
    console.print(
        f"{len(body['loads'])} loads, {body['restarts']} restarts, {body['crashes']} crashes, "
        f"{body['requests_served']} requests served"
    )
    return 0


def _summary(data: EventPayload) -> str:
    shown = {k: v for k, v in data.items() if k not in ("files", "params", "args", "stderr_tail", "commit")}
    text = " ".join(f"{k}={v}" for k, v in shown.items())
    return text if len(text) <= _SUMMARY else text[: _SUMMARY - 1] + "…"


def _line(event: WireEvent) -> tuple[str, str, str, str, str]:
    return (
        str(event["position"]),
        when(event["recorded_at"]),
        event["type"],
        event.get("model") or "",
        _summary(event["data"]),
    )


def print_events(console: Console, events: Iterable[WireEvent], *, as_json: bool) -> None:
    for event in events:
        if as_json:
            # Plain stdout, one object per line: for jq and scripts, not for rich.
            os.write(1, (json.dumps(event, separators=(",", ":")) + "\n").encode())
        else:
            console.print("  ".join(_line(event)), highlight=False, soft_wrap=True)


def events(client: Client, console: Console, params: Query, *, follow: bool, as_json: bool) -> int:
    """One page of ``GET /events`` (or, with ``follow``, the stream from now or ``--after``)."""
    if follow:
        stream_params = {k: v for k, v in params.items() if k != "limit" and v is not None}
        with client.events(stream_params) as stream:
            print_events(console, stream, as_json=as_json)
        return 0
    page = client.get("/events", **params)
    print_events(console, page["events"], as_json=as_json)
    if page["next_after"] is not None and not as_json:
        console.print(f"[dim]more: --after {page['next_after']}[/]")
    return 0


def _devices(node: Mapping[str, Any]) -> str:
    """A node's devices, one a line, as llama-server's ``--list-devices`` words them, with the backend."""
    lines = [
        f"{d['name']} ({d['backend']}): {d['total_bytes'] // MIB} MiB, {d['free_bytes'] // MIB} MiB free"
        for d in node.get("devices") or ()
    ]
    return "\n".join(lines) or "-"


def nodes(client: Client, console: Console) -> int:
    """The cluster's nodes (``GET /nodes``; without ``--node``, this service as ``local``): state, memory for
    models and in use, what each runs and holds, and its devices."""
    answer = client.get("/nodes")
    table = _table("NODE", "STATE", "URL", "CPUS", "MEMORY", "USED", "LOADED", "HOLDS", "DEVICES")
    this = shown_node(answer.get("node"))
    for n in answer["data"]:
        here = " (this)" if n["name"] == this else ""
        table.add_row(
            n["name"] + here,
            n["state"],
            n["url"],
            str(n["cpus"]),
            size(n["memory_bytes"]),
            size(n["memory_used_bytes"]),
            ", ".join(n["loaded"]) or "-",
            ", ".join(n["holds"]) or "-",
            _devices(n),
        )
    console.print(table if answer["data"] else "no nodes")
    return 0
