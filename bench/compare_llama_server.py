"""The same requests to llama-server and to ``modelrouter serve``, both started with the same command line:
where their answers' contracts differ (status, JSON shape, stream shape, error type).

Issue 20's "where llama-server's answer is part of the contract (shape, error type,
status), compare against it on the same request". It needs a llama-server binary
(``python -m devtools.llama_build llama-server`` builds the one our wheel's llama.cpp
vendors, ~12 minutes on 2 cores), which CI does not build, so it lives here beside the
benchmarks rather than in the suite; the suite's tests assert the shapes this run
confirmed. Three tiny generated models: a llama with FIM tokens (chat, completion,
infill, tokenize...), a BERT embedding model and a BERT reranker; and router mode
(``--models-dir`` holding the llama, requests naming it).

A shape is the answer with its values replaced by their JSON types (numbers are
one type: llama-server writes ``1.0`` where Python writes ``1``); lists by the
shape of their first element. Reported per request: keys llama-server sends that
we do not ("missing": a drop-in gap), keys only we send ("extra": allowed), and
type differences. Prints a summary and exits 1 when anything is missing or differs.

    python bench/compare_llama_server.py [--llama-server PATH] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from embeddings import Server  # bench/embeddings.py: a server up once /health answers 200

from devtools.service_process import ServiceProcess
from devtools.tiny_gguf import write_tiny_bert, write_tiny_gguf
from service.supervision.ports import free_port

ROOT = Path(__file__).resolve().parents[1]
CHAT = [{"role": "user", "content": "hello"}]

Request = tuple[str, str, Any]  # method, path, JSON body (None: GET)

LLAMA_REQUESTS: list[Request] = [
    ("GET", "/health", None),
    ("GET", "/v1/models", None),
    ("GET", "/props", None),
    ("GET", "/slots", None),
    ("POST", "/completion", {"prompt": "abc", "n_predict": 4, "seed": 1}),
    ("POST", "/completion", {"prompt": "abc", "n_predict": 4, "seed": 1, "stream": True}),
    ("POST", "/completion", {"prompt": "abc", "n_predict": 2, "n_probs": 2}),
    ("POST", "/v1/completions", {"prompt": "abc", "max_tokens": 4, "seed": 1}),
    ("POST", "/v1/completions", {"prompt": "abc", "max_tokens": 4, "seed": 1, "stream": True}),
    ("POST", "/v1/completions", {"prompt": "abc", "max_tokens": 2, "logprobs": 2}),
    ("POST", "/v1/chat/completions", {"messages": CHAT, "max_tokens": 4, "seed": 1}),
    ("POST", "/v1/chat/completions", {"messages": CHAT, "max_tokens": 4, "seed": 1, "stream": True}),
    ("POST", "/v1/chat/completions", {"messages": CHAT, "max_tokens": 2, "logprobs": True, "top_logprobs": 2}),
    (
        "POST",
        "/v1/chat/completions",
        {"messages": CHAT, "max_tokens": 4, "stream": True, "stream_options": {"include_usage": True}},
    ),
    ("POST", "/tokenize", {"content": "abc cab", "with_pieces": True}),
    ("POST", "/tokenize", {"content": "abc", "add_special": True}),
    ("POST", "/detokenize", {"tokens": [7, 8, 9]}),
    ("POST", "/apply-template", {"messages": CHAT}),
    ("POST", "/infill", {"input_prefix": "def f(", "input_suffix": "):\n", "n_predict": 4}),
    ("POST", "/v1/messages", {"model": "x", "max_tokens": 4, "messages": CHAT}),
    ("POST", "/v1/messages", {"model": "x", "max_tokens": 4, "messages": CHAT, "stream": True}),
    ("POST", "/v1/messages/count_tokens", {"model": "x", "messages": CHAT}),
    ("POST", "/v1/responses", {"model": "x", "input": "hello", "max_output_tokens": 4}),
    ("POST", "/v1/responses", {"model": "x", "input": "hello", "max_output_tokens": 4, "stream": True}),
    # errors: their status and error type are the contract
    ("POST", "/completion", {"prompt": "abc " * 400, "n_predict": 4}),
    ("POST", "/v1/chat/completions", {"max_tokens": 4}),
    ("POST", "/v1/chat/completions", {"messages": "not a list", "max_tokens": 4}),
    ("POST", "/tokenize", {"tokens": "not content"}),
    ("POST", "/v1/embeddings", {"input": "abc"}),
    ("POST", "/v1/rerank", {"query": "a", "documents": ["b"]}),
    ("GET", "/no/such/route", None),
]
EMBED_REQUESTS: list[Request] = [
    ("POST", "/v1/embeddings", {"input": ["abc", "cab"]}),
    ("POST", "/v1/embeddings", {"input": "abc", "encoding_format": "base64"}),
    ("POST", "/embedding", {"content": "abc"}),
    ("POST", "/embeddings", {"content": ["abc", "cab"]}),
    ("POST", "/v1/embeddings", {"input": ""}),
    ("POST", "/completion", {"prompt": "abc", "n_predict": 2}),
]
RANK_REQUESTS: list[Request] = [
    ("POST", "/v1/rerank", {"query": "abc", "documents": ["abc", "xyz", "cab"]}),
    ("POST", "/rerank", {"query": "abc", "documents": ["abc", "xyz"], "top_n": 1, "return_text": True}),
    ("POST", "/reranking", {"query": "abc", "documents": ["abc"]}),
    ("POST", "/v1/rerank", {"query": "abc", "documents": []}),
    ("POST", "/v1/rerank", {"documents": ["abc"]}),
]

ROUTED = {"model": "tiny-fim"}
ROUTER_REQUESTS: list[Request] = [
    ("GET", "/v1/models", None),
    ("GET", "/models", None),
    ("GET", "/props", None),
    ("POST", "/v1/chat/completions", {**ROUTED, "messages": CHAT, "max_tokens": 4, "seed": 1}),  # loads it
    ("GET", "/props?model=tiny-fim", None),
    ("GET", "/slots?model=tiny-fim", None),
    ("POST", "/v1/chat/completions", {**ROUTED, "messages": CHAT, "max_tokens": 4, "seed": 1, "stream": True}),
    ("POST", "/completion", {**ROUTED, "prompt": "abc", "n_predict": 4, "seed": 1}),
    ("POST", "/v1/completions", {**ROUTED, "prompt": "abc", "max_tokens": 4, "seed": 1, "stream": True}),
    ("POST", "/tokenize", {**ROUTED, "content": "abc cab", "with_pieces": True}),
    ("POST", "/infill", {**ROUTED, "input_prefix": "def f(", "input_suffix": "):\n", "n_predict": 4}),
    ("POST", "/v1/messages", {**ROUTED, "max_tokens": 4, "messages": CHAT}),
    ("POST", "/v1/responses", {**ROUTED, "input": "hello", "max_output_tokens": 4}),
    ("GET", "/v1/models", None),  # now loaded
    # errors: a model nobody has, none named, a prompt over the context
    ("POST", "/v1/chat/completions", {"model": "no-such-model", "messages": CHAT, "max_tokens": 4}),
    ("POST", "/v1/chat/completions", {"messages": CHAT, "max_tokens": 4}),
    ("POST", "/completion", {**ROUTED, "prompt": "abc " * 400, "n_predict": 4}),
    ("POST", "/models/unload", ROUTED),
    ("POST", "/models/unload", ROUTED),  # not running any more
    ("POST", "/models/load", ROUTED),
]


def shape(value: Any) -> Any:
    """``value`` with every leaf replaced by its JSON type, lists by their first element's shape."""
    if isinstance(value, dict):
        return {k: shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [shape(value[0])] if value else []
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if value is None:
        return "null"
    return "string"


def differences(theirs: Any, ours: Any, path: str = "") -> Iterator[tuple[str, str]]:
    """(kind, where) for every way ``ours`` differs from ``theirs``: missing, extra, type."""
    if isinstance(theirs, dict) and isinstance(ours, dict):
        for k in theirs.keys() - ours.keys():
            yield "missing", f"{path}.{k}"
        for k in ours.keys() - theirs.keys():
            yield "extra", f"{path}.{k}"
        for k in theirs.keys() & ours.keys():
            yield from differences(theirs[k], ours[k], f"{path}.{k}")
    elif isinstance(theirs, list) and isinstance(ours, list):
        if theirs and ours:
            yield from differences(theirs[0], ours[0], f"{path}[]")
    elif theirs != ours and "null" not in (theirs, ours):  # null vs a value: the same field, another state
        yield "type", f"{path}: {theirs} vs {ours}"


@dataclass
class Answer:
    status: int
    body: Any  # a JSON shape, a list of SSE event shapes, or text
    events: list[str] = field(default_factory=list)  # SSE ``event:`` names


def _answer(client: httpx.Client, base: str, method: str, path: str, body: Any) -> Answer:
    r = client.request(method, base + path, json=body) if body is not None else client.request(method, base + path)
    ctype = r.headers.get("content-type", "")
    if "text/event-stream" in ctype:
        data, names = [], []
        for line in r.text.splitlines():
            if line.startswith("event:"):
                names.append(line[6:].strip())
            elif line.startswith("data:") and line[5:].strip() != "[DONE]":
                data.append(shape(json.loads(line[5:])))
        return Answer(r.status_code, data, names)
    try:
        return Answer(r.status_code, shape(r.json()))
    except ValueError:
        return Answer(r.status_code, r.text[:80])


def _stream_shapes(events: list[Any]) -> dict[str, Any]:
    """A stream by its first, second, next-to-last and last events (the ones whose shapes differ)."""
    if not events:
        return {}
    picks = {"first": events[0], "second": events[min(1, len(events) - 1)]}
    picks["next_to_last"], picks["last"] = events[max(len(events) - 2, 0)], events[-1]
    return picks


def compare(theirs: Answer, ours: Answer) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    if theirs.status != ours.status:
        out.append(("status", f"{theirs.status} vs {ours.status}"))
    names = list(dict.fromkeys(theirs.events)), list(dict.fromkeys(ours.events))  # distinct, in order
    if names[0] != names[1]:
        out.append(("events", f"{names[0]} vs {names[1]}"))
    t, o = theirs.body, ours.body
    if isinstance(t, list) and isinstance(o, list) and t and isinstance(t[0], dict):  # a stream
        t, o = _stream_shapes(t), _stream_shapes(o)
    if isinstance(t, str) or isinstance(o, str):
        if type(t) is not type(o):
            out.append(("type", f"body {str(t)[:40]!r} vs {str(o)[:40]!r}"))
        return out
    out.extend(differences(t, o))
    return out


def _llama_server(binary: str, args: list[str]) -> Server:
    return Server([binary, *args, "--host", "127.0.0.1", "--port", str(free_port())], {})


def run_case(binary: str, home: Path, name: str, args: list[str], requests: list[Request]) -> dict[str, Any]:
    theirs = _llama_server(binary, args)
    ours = ServiceProcess(home / name, args=args).start(timeout=120)
    report: dict[str, Any] = {}
    try:
        with httpx.Client(timeout=120) as client:
            for i, (method, path, body) in enumerate(requests):
                key = f"{i:02d} {method} {path} {json.dumps(body) if body is not None else ''}".strip()
                a = _answer(client, theirs.base, method, path, body)
                b = _answer(client, ours.url, method, path, body)
                report[key] = {"status": [a.status, b.status], "differences": compare(a, b)}
    finally:
        theirs.stop()
        ours.stop()
    return report


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--llama-server", default=None)
    p.add_argument("--json", default=None, help="write the whole report here")
    args = p.parse_args(argv)
    binary = (
        args.llama_server
        or subprocess.run(
            [sys.executable, "-m", "devtools.llama_build", "llama-server"],
            capture_output=True,
            text=True,
            check=True,
            cwd=ROOT,
        )
        .stdout.strip()
        .splitlines()[-1]
    )
    tmp = Path(tempfile.mkdtemp(prefix="compare-llama-server-"))
    llama = write_tiny_gguf(tmp / "models" / "tiny-fim.gguf", fim=True)
    bert = write_tiny_bert(tmp / "models" / "tiny-bert.gguf")
    rank = write_tiny_bert(tmp / "models" / "tiny-rank.gguf", pooling="rank")
    cases = {
        "llama": (["-m", str(llama), "-c", "512", "--jinja", "--metrics"], LLAMA_REQUESTS),
        "embedding": (["-m", str(bert), "--embedding"], EMBED_REQUESTS),
        "rerank": (["-m", str(rank), "--reranking"], RANK_REQUESTS),
        "router": (["--models-dir", str(llama.parent / "router"), "-c", "512", "--jinja"], ROUTER_REQUESTS),
    }
    (llama.parent / "router").mkdir()
    shutil.copyfile(llama, llama.parent / "router" / "tiny-fim.gguf")  # a link leading out is refused (confinement)
    os.environ.setdefault("MODELROUTER_LOG_JSON", "true")
    report = {name: run_case(binary, tmp, name, a, reqs) for name, (a, reqs) in cases.items()}
    bad = 0
    for name, rows in report.items():
        print(f"== {name}")
        for key, row in rows.items():
            diffs = [d for d in row["differences"] if d[0] != "extra"]
            extra = [d[1] for d in row["differences"] if d[0] == "extra"]
            mark = "DIFF" if diffs else "same"
            bad += bool(diffs)
            print(f"  {mark} {row['status'][0]}/{row['status'][1]} {key[:110]}")
            for kind, where in diffs:
                print(f"       {kind}: {where}")
            if extra:
                print(f"       (ours also: {', '.join(extra[:8])}{' ...' if len(extra) > 8 else ''})")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))
    print(f"{bad} request(s) differ in status or shape")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
